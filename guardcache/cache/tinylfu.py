"""TinyLFUCache: W-TinyLFU with an adaptive window, after Caffeine, on the policy seam.

Plain LFU never forgets: counts earned by traffic that moved on keep their entries. W-TinyLFU
(Einziger, Friedman, Manes: "TinyLFU: A Highly Efficient Cache Admission Policy"; Caffeine's
policy) puts an admission filter in front of the main space:

- a new entry enters the **window**, an LRU (1% of the capacity at first);
- the window's overflow (its least recent entry, the *candidate*) enters **main** only if it is
  asked for at least as often as main's next *victim*; the loser leaves. So one-off keys pass
  through the window and never displace what is asked for again;
- main is **protected** (80%: entries asked for again while in main, least recent out first, back
  to probation) and **probation** (the rest, where victims come from);
- counts are forgotten at a steady pace: every count is halved each sample period (10 times the
  capacity in requests), so what was popular an hour ago loses to what is popular now;
- the window's size **hill-climbs** (:mod:`~guardcache.cache.climber`): large for traffic that
  repeats within a short while (recency), small for traffic with a stable popular head.

Where this differs from Caffeine, and why (measured with ``benchmarks/bench_policy.py``: five
guard-like traces at 1,000, 10,000 and 50,000 entries):

- **Probation is ordered by count**, least recent first within a count (one ring per count, 0-15),
  not by recency alone: the victim is the least asked-for entry of probation. With Caffeine's LRU
  probation, entries of a drifting or shifted head that nobody asks for any more sat in main until
  the next halving (drift at 50,000 entries: 50.4% hits, LFU-with-aging 52.6%); ordered by count
  they are the first to go. A main ordered by count alone (no protected segment) lost ~3 points
  at 1,000 entries: protected is what keeps the recent repeats.
- **Ties admit**: a candidate as popular as the victim replaces it (Caffeine keeps the victim). The
  keys of a shifted audience start level with the old audience's leftovers; on ties they get in at
  once (simulated, with probation by count: drift at 50,000 entries 50.7% -> 51.9%, shift 53.6% ->
  54.3%).
- **An entry the cache holds keeps its own count** (``freq``, one byte a slot, halved with the
  sketch), started from the sketch's estimate when it is stored; only a miss touches the sketch (and
  an entry that leaves returns a count it earned to it). A get hit then costs one byte increment
  instead of hashing the key into the sketch: the hit path stays near the LFU's, and held entries'
  counts are exact.
- The sketch is one counter a key, not four (:mod:`~guardcache.cache.sketch`).
- The climber does not measure the period after a move, and takes larger steps while they pay (see
  its module). A move changes only the limits: a grown window fills with newcomers (each takes main's
  victim's place instead of dueling it), and a shrunk queue is brought down at most ``TRANSFER``
  entries a check, as Caffeine bounds its own transfers, so no put holds the lock for long.

Everything else of the cache (lock, single flight, stats, the ``TinyLFU Cache Statistics`` line,
introspection) is :class:`~guardcache.cache.policy_cache.PolicyCache`'s.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, MutableSequence
from typing import Any, ClassVar, NamedTuple

from guardcache.cache.climber import HillClimber
from guardcache.cache.policy import GetPath, HotPaths, PolicyFactory, PolicyState
from guardcache.cache.policy_cache import PolicyCache
from guardcache.cache.policy_state import check_restorable, export_columns, keep_safest, store_entry
from guardcache.cache.sketch import CAP, GOLDEN, SHIFT, FrequencySketch, spread, table_size
from guardcache.cache.slots import Slots
from guardcache.cache.slots import clock as _clock

# The queues; each one's number is also the slot of its sentinel (its ring's head). Probation is
# one queue per count: the entries of count c are queue PROBATION + c.
WINDOW = 0
PROTECTED = 1
PROBATION = 2
_QUEUES = PROBATION + CAP + 1
_HALVE = bytes(i >> 1 for i in range(256))
# Halving moves a probation entry of count c to the queue of count c // 2 (a C-speed translate of
# the queue numbers; the rings themselves are spliced, see age()).
_HALVE_QUEUE = bytes(
    q if q < PROBATION or q >= _QUEUES else PROBATION + ((q - PROBATION) >> 1) for q in range(256)
)


class Sizes(NamedTuple):
    """The queues' sizes and limits at one instant (probation's limit is what main leaves)."""

    window: int
    probation: int
    protected: int
    window_max: int
    protected_max: int


class _Paths(NamedTuple):
    hot: HotPaths
    touch: Callable[[int, float | None], None]
    remove: Callable[[Hashable], bool]
    reset: Callable[[], None]
    sizes: Callable[[], Sizes]
    export_state: Callable[[], PolicyState]
    restore_state: Callable[[PolicyState], int]


class TinyLFUPolicy(Slots):
    """W-TinyLFU's queues over the slot table (see the module doc). Tuning is in the class
    attributes; a subclass with other values is another policy (the benchmarks use that)."""

    name: ClassVar[str] = "TinyLFU"
    #: The window's share of the capacity at first.
    WINDOW: ClassVar[float] = 0.01
    #: Protected's share of main (the rest is probation).
    PROTECTED: ClassVar[float] = 0.8
    #: Counts are halved every SAMPLE x capacity requests.
    SAMPLE: ClassVar[float] = 10.0
    #: The climber compares hit rates over CLIMB_PERIOD x capacity requests, at least MIN_PERIOD:
    #: over 50,000 requests a hit rate's noise is ~0.2 points, below what one step changes.
    CLIMB_PERIOD: ClassVar[float] = 1.0
    MIN_PERIOD: ClassVar[int] = 50_000
    #: The climber's first and restart step (share of the capacity; 0: a fixed window), its growth
    #: while steps keep paying (x ACCEL, up to MAX_STEP), its decay after a step that did not
    #: (x DECAY, turning round), and the change of hit rate that restarts it (RESTART).
    STEP: ClassVar[float] = 0.0625
    ACCEL: ClassVar[float] = 1.5
    MAX_STEP: ClassVar[float] = 0.25
    DECAY: ClassVar[float] = 0.98
    RESTART: ClassVar[float] = 0.05
    #: A candidate that lost its duel is admitted anyway once in 128 when its count is at least
    #: this (Caffeine's defence against a victim made to look popular by hash collisions).
    ADMIT_ANYWAY: ClassVar[int] = 6
    #: Evictions between checks for aging and climbing (the periods are requests; a check is a
    #: few additions, so not on every put).
    MAINTAIN_EVERY: ClassVar[int] = 64
    #: The most entries one check moves between queues (Caffeine's QUEUE_TRANSFER_THRESHOLD).
    TRANSFER: ClassVar[int] = 1000

    def __init__(self, maxsize: int, lock: threading.RLock) -> None:
        super().__init__(sentinels=_QUEUES)
        self.maxsize = maxsize
        self.prev: list[int] = list(range(_QUEUES))  # each sentinel alone in its ring
        self.next: list[int] = list(range(_QUEUES))
        self.queue = bytearray(range(_QUEUES))  # by slot: which queue it is in
        self.freq = bytearray(_QUEUES)  # by slot: the entry's count (aged with the sketch)
        # Sized for the capacity once the cache is half full (as Caffeine does): a large cache
        # that stays small never pays for a large table.
        self.sketch = FrequencySketch(0)
        paths = _paths(self, lock)
        #: This cache's ``get`` and ``put`` over these containers.
        self.hot: HotPaths = paths.hot
        self._paths = paths

    def columns(self) -> tuple[MutableSequence[Any], ...]:
        return (*super().columns(), self.prev, self.next, self.queue, self.freq)

    def touch(self, i: int, now: float | None = None) -> None:
        self._paths.touch(i, now)

    def remove(self, key: Hashable) -> bool:
        return self._paths.remove(key)

    def reset(self) -> None:
        self._paths.reset()

    def frequency(self, i: int) -> int:
        """The entry's count: its requests, aged as the sketch's (so at most 15)."""
        return self.freq[i]

    def export_state(self) -> PolicyState:
        """The entries in eviction order with their queues and counts, and the sketch, the queues'
        limits, the aging and climbing periods' progress and the climber's state (``extra``)."""
        return self._paths.export_state()

    def restore_state(self, state: PolicyState) -> int:
        """The entries back in their queues, in order; the rest of the state too when ``state`` is
        of a cache of this ``maxsize`` (else the limits start as a new cache's and the queues are
        brought within them)."""
        return self._paths.restore_state(state)

    def sizes(self) -> Sizes:
        """The queues' sizes and limits now."""
        return self._paths.sizes()

    def queue_keys(self, queue: int) -> list[Hashable]:
        """The keys of one queue, least recently used first."""
        out = []
        i = self.next[queue]
        while i != queue:
            out.append(self.keys[i])
            i = self.next[i]
        return out

    def eviction_order(self) -> list[Hashable]:
        """Main's victims in order (probation by count, each count least recent first, then
        protected, least recent first), then the window's entries, each of which will face the
        victim of its day when it leaves the window."""
        order: list[Hashable] = []
        for q in (*range(PROBATION, _QUEUES), PROTECTED, WINDOW):
            order.extend(self.queue_keys(q))
        return order


def _initial_window(maxsize: int, share: float) -> int:
    if maxsize <= 1:
        return maxsize
    return min(maxsize - 1, max(1, round(maxsize * share)))


def _paths(s: TinyLFUPolicy, lock: threading.RLock) -> _Paths:
    """The policy's operations as closures over its containers and a few counters in cells (the
    technique of :func:`~guardcache.cache.lfu_core.hot_paths`; see there for why)."""
    acquire, release = lock.acquire, lock.release
    index, keys, values, created, accessed = s.index, s.keys, s.values, s.created, s.accessed
    prv, nxt, queue, freq, free = s.prev, s.next, s.queue, s.freq, s.free
    sketch = s.sketch
    table, tmask = sketch.table, sketch.mask  # rebound when the sketch is sized
    maxsize = s.maxsize
    admit_anyway = s.ADMIT_ANYWAY
    maintain_every = s.MAINTAIN_EVERY
    transfer = s.TRANSFER
    sample = max(1, round(s.SAMPLE * maxsize))
    period = max(s.MIN_PERIOD, round(s.CLIMB_PERIOD * maxsize))
    last_bucket = _QUEUES - 1
    # Totals since creation (the cache's stats read the first four through counts()).
    hits = misses = evictions = updates = 0
    touches = cleared = 0  # accesses through touch(); entries dropped by reset()
    window = protected = 0  # entries in those queues (probation: the rest)
    low = PROBATION  # every probation queue below this one is empty
    window_max = _initial_window(maxsize, s.WINDOW)
    protected_max = int(s.PROTECTED * (maxsize - window_max))
    sized = maxsize == 0  # whether the sketch has its full table yet
    next_age = sample
    climber = (
        HillClimber(
            maxsize, step=s.STEP, accel=s.ACCEL, max_step=s.MAX_STEP, decay=s.DECAY, restart=s.RESTART
        )
        if s.STEP
        else None
    )
    next_climb = period
    next_evictions = 0  # maintain() runs at the first eviction from here
    last_hits = last_inserted = 0
    rand = 0x2545F491  # xorshift32 state, for the once-in-128 admission

    def link(i: int, q: int) -> None:
        """Append slot ``i`` at the most recent end of queue ``q``."""
        p = prv[q]
        nxt[p] = i
        prv[i] = p
        nxt[i] = q
        prv[q] = i
        queue[i] = q

    def unlink(i: int) -> None:
        p = prv[i]
        n = nxt[i]
        nxt[p] = n
        prv[n] = p

    def to_probation(i: int) -> None:
        """Append slot ``i`` (unlinked) to probation's queue of its count."""
        nonlocal low
        q = PROBATION + freq[i]
        link(i, q)
        if q < low:
            low = q

    def demote() -> None:
        """Protected's least recent entry goes back to probation (at its count)."""
        nonlocal protected
        d = nxt[PROTECTED]
        unlink(d)
        to_probation(d)
        protected -= 1

    def access(i: int, now: float) -> None:
        """A hit on slot ``i`` at ``now`` that did not come through ``get`` (the same moves,
        unrolled there)."""
        nonlocal protected
        f = freq[i]
        if f < CAP:
            freq[i] = f + 1
        q = queue[i]
        if q >= PROBATION:
            unlink(i)
            link(i, PROTECTED)
            protected += 1
            if protected > protected_max:
                demote()
        elif prv[q] != i:
            unlink(i)
            link(i, q)
        accessed[i] = now

    def get(key: Hashable, default: Any = None) -> Any:
        nonlocal hits, misses, protected
        acquire()
        try:
            i = index.get(key)
            if i is None:
                misses += 1
                return default
            hits += 1
            f = freq[i]
            if f < CAP:
                freq[i] = f + 1
            q = queue[i]
            if q >= PROBATION:  # promote to protected; protected's overflow drops to probation
                p = prv[i]
                n = nxt[i]
                nxt[p] = n
                prv[n] = p
                p = prv[PROTECTED]
                nxt[p] = i
                prv[i] = p
                nxt[i] = PROTECTED
                prv[PROTECTED] = i
                queue[i] = PROTECTED
                protected += 1
                if protected > protected_max:
                    demote()
            else:
                p = prv[q]
                if p != i:  # not already the most recent of its queue: move it there
                    n = nxt[i]
                    o = prv[i]
                    nxt[o] = n
                    prv[n] = o
                    nxt[p] = i
                    prv[i] = p
                    nxt[i] = q
                    prv[q] = i
            accessed[i] = _clock()
            return values[i]
        finally:
            release()

    def expiring(ttl: float, clock: Callable[[], float], expire: Callable[[Hashable], None]) -> GetPath:
        """``get`` for a cache with a ``ttl``: the same moves, the entry's age read from the clock
        read a hit makes anyway (see :func:`~guardcache.cache.lfu_core.hot_paths`' ``expiring``
        for why a second copy, and what keeps it in step)."""

        deadline = s.keep_deadlines()

        def expiring_get(key: Hashable, default: Any = None) -> Any:
            nonlocal hits, misses, protected
            acquire()
            try:
                i = index.get(key)
                if i is None:
                    misses += 1
                    return default
                now = clock()
                if now >= deadline[i]:
                    expire(key)
                    misses += 1
                    return default
                hits += 1
                f = freq[i]
                if f < CAP:
                    freq[i] = f + 1
                q = queue[i]
                if q >= PROBATION:
                    p = prv[i]
                    n = nxt[i]
                    nxt[p] = n
                    prv[n] = p
                    p = prv[PROTECTED]
                    nxt[p] = i
                    prv[i] = p
                    nxt[i] = PROTECTED
                    prv[PROTECTED] = i
                    queue[i] = PROTECTED
                    protected += 1
                    if protected > protected_max:
                        demote()
                else:
                    p = prv[q]
                    if p != i:
                        n = nxt[i]
                        o = prv[i]
                        nxt[o] = n
                        prv[n] = o
                        nxt[p] = i
                        prv[i] = p
                        nxt[i] = q
                        prv[q] = i
                accessed[i] = now
                return values[i]
            finally:
                release()

        return expiring_get

    def victim() -> int:
        """Main's next victim, always in probation: the least recent entry of its lowest count
        (protected's least recent is demoted first if probation is empty, which can only happen
        while a shrunk protected is still being brought down); ``PROTECTED`` when main is empty
        (capacity 1). Moves ``low`` (below it every probation queue is empty) up to the queue it
        found."""
        nonlocal low
        q = low
        while q <= last_bucket:
            v = nxt[q]
            if v != q:
                low = q
                return v
            q += 1
        low = last_bucket  # (probation is empty)
        v = nxt[PROTECTED]
        if v != PROTECTED:
            demote()
        return v

    def evict(v: int) -> None:
        """Take slot ``v``'s entry out and unlink it (the cold paths' eviction; ``put`` inlines
        its own). A count the entry earned while held goes back to the sketch."""
        nonlocal evictions, protected
        key = keys[v]
        del index[key]
        f = freq[v]
        if f > 1:
            sketch.raise_to(spread(key), f)
        evictions += 1
        unlink(v)
        if queue[v] == PROTECTED:
            protected -= 1

    def put(key: Hashable, value: Any) -> None:
        nonlocal updates, evictions, window, rand, sized, table, tmask, low
        acquire()
        try:
            i = index.get(key)
            if i is not None:
                values[i] = value
                updates += 1
                now = _clock()
                access(i, now)
                created[i] = now
                return
            now = _clock()
            if sized:  # FrequencySketch.increment(spread(key)), inlined
                a = (hash(key) * GOLDEN >> SHIFT) & tmask
                count = table[a]
                if count < CAP:
                    count += 1
                    table[a] = count
            else:  # the sketch counts nothing until it is sized; nothing is evicted before
                count = 1
            if len(index) >= maxsize:
                # Full. The newcomer takes the window's newest place; the window's oldest entry
                # (the candidate) duels main's next victim, and the loser leaves.
                v = nxt[low]
                if v == low:
                    v = victim()
                c = nxt[WINDOW]
                if v == PROTECTED:  # no main at all (capacity 1): the candidate goes
                    i = c
                    evict(c)
                elif window < window_max:  # the window is below its size (it just grew)
                    i = v
                    evict(v)
                    window += 1
                else:
                    fc = freq[c]
                    fv = freq[v]
                    admit = fc >= fv
                    if not admit and fc >= admit_anyway:
                        rand ^= (rand << 13) & 0xFFFFFFFF
                        rand ^= rand >> 17
                        rand ^= (rand << 5) & 0xFFFFFFFF
                        admit = rand & 127 == 0
                    if admit:  # the victim goes, its slot takes the newcomer
                        i = v
                        f = fv
                        p = prv[v]  # unlink the victim (in probation: see victim())
                        n = nxt[v]
                        nxt[p] = n
                        prv[n] = p
                        n = nxt[c]  # the candidate joins probation at its count
                        nxt[WINDOW] = n
                        prv[n] = WINDOW
                        q = PROBATION + fc
                        p = prv[q]
                        nxt[p] = c
                        prv[c] = p
                        nxt[c] = q
                        prv[q] = c
                        queue[c] = q
                        if q < low:
                            low = q
                    else:  # the candidate goes, its slot takes the newcomer
                        i = c
                        f = fc
                        n = nxt[c]
                        nxt[WINDOW] = n
                        prv[n] = WINDOW
                    old = keys[i]
                    del index[old]
                    if f > 1:  # a count earned while held goes back to the sketch
                        sketch.raise_to(spread(old), f)
                    evictions += 1
            else:
                i = free.pop() if free else s.grow()
                window += 1
                if window > window_max:  # not full yet: the window's overflow joins probation
                    c = nxt[WINDOW]
                    unlink(c)
                    to_probation(c)
                    window -= 1
                if not sized and len(index) + 1 >= maxsize >> 1:
                    sketch.resize(maxsize)
                    table, tmask = sketch.table, sketch.mask
                    sized = True
            keys[i] = key
            values[i] = value
            index[key] = i
            created[i] = now
            accessed[i] = None
            freq[i] = count
            p = prv[WINDOW]  # the newcomer is the window's most recent
            nxt[p] = i
            prv[i] = p
            nxt[i] = WINDOW
            prv[WINDOW] = i
            queue[i] = WINDOW
            if evictions >= next_evictions:
                maintain()
        finally:
            release()

    def age() -> None:
        """Halve every count, the sketch's and the entries' own; probation's queue of count c
        joins the end of count c // 2's (so the lower old count still goes first)."""
        nonlocal low
        low = PROBATION
        sketch.halve()
        freq[:] = freq.translate(_HALVE)
        queue[:] = queue.translate(_HALVE_QUEUE)
        for c in range(1, CAP + 1):
            a = PROBATION + c
            first = nxt[a]
            if first == a:
                continue
            b = PROBATION + (c >> 1)
            last = prv[a]
            tail = prv[b]
            nxt[tail] = first
            prv[first] = tail
            nxt[last] = b
            prv[b] = last
            nxt[a] = prv[a] = a

    def maintain() -> None:
        """Age the counts and climb the window when their periods are over, and move entries
        between the queues towards their limits (checked every ``MAINTAIN_EVERY`` evictions: a run
        of hits has nothing to admit, so nothing to decide)."""
        nonlocal next_age, next_climb, next_evictions, last_hits, last_inserted
        next_evictions = evictions + maintain_every
        # The puts are derived, as the stats derive them.
        inserted = len(index) + evictions + s.removed + cleared
        requests = hits + touches + updates + inserted
        if requests >= next_age:
            next_age = requests + sample
            age()
        if requests >= next_climb:
            next_climb = requests + period
            period_hits = hits + touches + updates - last_hits
            period_misses = inserted - last_inserted
            last_hits += period_hits
            last_inserted += period_misses
            if climber is not None and len(index) >= maxsize:
                resize_window(climber.adjust(period_hits, period_misses))
        rebalance()

    def resize_window(delta: int) -> None:
        """Move ``delta`` of the capacity from main to the window (negative: back). Only the limits
        change here: a larger window fills with newcomers (each takes the place of main's victim
        instead of dueling it), a smaller one and an overfull protected are brought down by
        :func:`rebalance`, a bounded number of entries at a time."""
        nonlocal window_max, protected_max
        if maxsize <= 1 or delta == 0:
            return
        window_max = min(maxsize - 1, max(1, window_max + delta))
        protected_max = int(s.PROTECTED * (maxsize - window_max))

    def rebalance() -> None:
        """Up to ``TRANSFER`` moves (as Caffeine bounds its own) towards the queues' limits: the
        window's oldest to probation, protected's oldest back to probation; so a resize never
        holds the lock for a pass over a large cache."""
        nonlocal window
        budget = transfer
        while window > window_max and budget:
            c = nxt[WINDOW]
            unlink(c)
            to_probation(c)
            window -= 1
            budget -= 1
        while protected > protected_max and budget:
            demote()
            budget -= 1

    def touch(i: int, now: float | None = None) -> None:
        nonlocal touches
        touches += 1
        access(i, _clock() if now is None else now)

    def remove(key: Hashable) -> bool:
        nonlocal window, protected
        i = index.pop(key, None)
        if i is None:
            return False
        q = queue[i]
        if q == WINDOW:
            window -= 1
        elif q == PROTECTED:
            protected -= 1
        unlink(i)
        s.release(i)
        return True

    def reset() -> None:
        nonlocal window, protected, low, cleared
        cleared += len(index)
        s.reset_slots()
        for q in range(_QUEUES):
            prv[q] = nxt[q] = q
        window = protected = 0
        low = PROBATION

    def sizes() -> Sizes:
        return Sizes(window, len(index) - window - protected, protected, window_max, protected_max)

    def put_nothing(key: Hashable, value: Any) -> None:
        """``put`` of a cache with maxsize 0: nothing is stored (or counted)."""

    def counts() -> tuple[int, int, int, int]:
        return hits, misses, evictions, updates

    def progress() -> tuple[int, int, int]:
        """Requests so far, hits (touches and updates included) and insertions, as maintain()
        counts them."""
        inserted = len(index) + evictions + s.removed + cleared
        served = hits + touches + updates
        return served + inserted, served, inserted

    def export_state() -> PolicyState:
        slots: list[int] = []
        for q in (*range(PROBATION, _QUEUES), PROTECTED, WINDOW):
            i = nxt[q]
            while i != q:
                slots.append(i)
                i = nxt[i]
        requests, served, inserted = progress()
        extra: dict[str, int | float | bytes] = {
            "sized": int(sized),
            "sketch": bytes(table) if sized else b"",
            "window_max": window_max,
            "protected_max": protected_max,
            # Where the periods stand, relative to now: a restored cache counts from zero.
            "until_age": next_age - requests,
            "until_climb": next_climb - requests,
            "until_maintain": next_evictions - evictions,
            "period_hits": served - last_hits,
            "period_misses": inserted - last_inserted,
            "rand": rand,
        }
        if climber is not None:
            extra.update(
                climb_step=climber.step,
                climb_last_rate=climber.last_rate,
                climb_settling=int(climber.settling),
            )
        return export_columns(s, slots, [freq[i] for i in slots], bytes(queue[i] for i in slots), extra)

    def restore_state(state: PolicyState) -> int:
        nonlocal window, protected, low, sized, table, tmask, window_max, protected_max
        nonlocal next_age, next_climb, next_evictions, last_hits, last_inserted, rand
        check_restorable(s, state)
        keep = keep_safest(state, maxsize)
        if any(not 0 <= state.frequency[k] <= CAP or state.segment[k] >= _QUEUES for k in keep):
            raise ValueError("a TinyLFU entry's count or queue is out of range")
        extra = state.extra
        same = state.policy == s.name and state.maxsize == maxsize and maxsize > 0
        sketch_bytes = extra.get("sketch", b"")
        wmax, pmax = extra.get("window_max"), extra.get("protected_max")
        if same:  # check everything before changing anything
            if not (
                isinstance(wmax, int)
                and isinstance(pmax, int)
                and 0 <= wmax <= maxsize
                and 0 <= pmax <= maxsize
            ):
                raise ValueError("a TinyLFU state's queue limits are out of range")
            if extra.get("sized") and (
                not isinstance(sketch_bytes, bytes)
                or len(sketch_bytes) != table_size(maxsize)
                or max(sketch_bytes, default=0) > CAP
            ):
                raise ValueError("a TinyLFU state's sketch does not fit this cache")
        for k in keep:
            i = s.grow()
            store_entry(s, i, k, state)
            f = state.frequency[k]
            freq[i] = f
            q = state.segment[k]
            if q >= PROBATION:
                q = PROBATION + f  # probation is ordered by count: an entry's queue is its count's
            link(i, q)
            if q == WINDOW:
                window += 1
            elif q == PROTECTED:
                protected += 1
        low = PROBATION
        requests, served, inserted = progress()

        def number(name: str, default: int, lo: int, hi: int) -> int:
            value = extra.get(name)
            return min(hi, max(lo, value)) if isinstance(value, int) else default

        if same:
            window_max, protected_max = int(wmax or 0), int(pmax or 0)  # (ints: checked above)
            if extra.get("sized") and isinstance(sketch_bytes, bytes):
                sketch.resize(maxsize)
                sketch.table[:] = sketch_bytes
                table, tmask = sketch.table, sketch.mask
                sized = True
            next_age = requests + number("until_age", sample, -(1 << 62), sample)  # (< 0: overdue)
            next_climb = requests + number("until_climb", period, -(1 << 62), period)
            next_evictions = evictions + number("until_maintain", 0, 0, maintain_every)
            last_hits = served - number("period_hits", 0, 0, period)
            last_inserted = inserted - number("period_misses", 0, 0, period)
            rand = number("rand", rand, 1, 0xFFFFFFFF)
            if climber is not None:
                step, rate = extra.get("climb_step"), extra.get("climb_last_rate")
                if isinstance(step, float) and abs(step) <= climber.max_step:
                    climber.step = step
                if isinstance(rate, float) and 0.0 <= rate <= 1.0:
                    climber.last_rate = rate
                climber.settling = bool(extra.get("climb_settling", 0))
        else:
            next_age, next_climb = requests + sample, requests + period
            last_hits, last_inserted = served, inserted
        if not sized and len(index) + 1 >= maxsize >> 1:
            sketch.resize(maxsize)
            table, tmask = sketch.table, sketch.mask
            sized = True
        while window > window_max or protected > protected_max:
            rebalance()  # a state of another capacity: its queues brought within this one's limits
        return len(index)

    hot = HotPaths(get, put if maxsize else put_nothing, counts, expiring)
    return _Paths(hot, touch, remove, reset, sizes, export_state, restore_state)


class TinyLFUCache(PolicyCache):
    """A bounded cache with W-TinyLFU admission and an adaptive window (see the module doc).

    The public face is the LFU's (:class:`~guardcache.cache.policy_cache.PolicyCache`): the same
    constructor, ``get``/``put``/``get_or_compute``/``get_or_load``/``entry``, single flight, stats,
    and the stats line with this policy's name: ``TinyLFU Cache Statistics - Size: ...``. What
    differs is who leaves: a put of a new key may evict an entry stored only a moment before (the
    window's oldest, when it loses its duel) rather than the least used of all, and
    ``entry(key).frequency`` is the entry's aged count (at most 15), not its lifetime accesses.
    """

    policy_type: ClassVar[PolicyFactory] = TinyLFUPolicy

    def sizes(self) -> Sizes:
        """The window's, probation's and protected's sizes and limits now (for tests and tuning)."""
        with self._lock:
            policy = self._s
            assert isinstance(policy, TinyLFUPolicy)
            return policy.sizes()


__all__ = ["PROBATION", "PROTECTED", "WINDOW", "Sizes", "TinyLFUCache", "TinyLFUPolicy"]
