"""Seeded, guard-like request traces for comparing cache eviction policies (issue 23).

A verdict cache sees one key per guard call: a normalized prompt (or response) hashed with the
rail's namespace. What real guard traffic looks like, and what each trace below models:

- a head of prompts that recur a lot (system-prompt-shaped requests, templates, retries, the same
  canned question asked by many users) and a very long tail of prompts seen once or a handful of
  times (free text). A Zipf law over a universe far larger than any cache has both.
- the head moves: products change, users move on, new templates replace old ones (``drift``,
  ``shift``); attackers send the same jailbreak family for a while and stop (``campaign``);
  scanners and fuzzers send prompts that never come back (``scan``).

Every generator returns an ``array('q')`` of int keys (8 bytes a request: a million-request trace
is 8 MB, and one trace is shared by every policy and cache size of a run). The keys' ranges say where
a request came from, which the tests use to check each shape:

- ``[0, UNIVERSE)`` and ``[SHIFTED, SHIFTED + UNIVERSE)``: the Zipf universes (rank r is key r,
  or ``SHIFTED + r`` after an audience shift);
- ``[FRESH, ...)``: keys made during the run (drift's replacements, campaign prompts, one-off scan
  prompts), each counter-allocated so no two sources share a key.

Generation is stdlib only (``random.choices`` over a cumulative table, i.e. a bisect per draw): a
million Zipf draws take well under a second. Same ``seed``, same trace, on any machine with the same
Python (``random`` guarantees that for ``choices`` with ``cum_weights``).
"""

from __future__ import annotations

import functools
import itertools
import random
from array import array
from collections.abc import Callable
from typing import TypeAlias

#: Requests in a full trace (the issue's figures are for one million).
DEFAULT_LENGTH = 1_000_000
#: Requests in a ``--quick`` trace: same shapes, for development runs.
QUICK_LENGTH = 200_000
#: Distinct prompts in the Zipf universe: three orders of magnitude past the smallest cache and 20x
#: the largest, so a large share of requests are a prompt's first (often only) appearance, as for a
#: guard whose users type free text.
UNIVERSE = 1_000_000
#: The Zipf exponent. 0.9 puts ~35% of requests on the top 1,000 prompts and ~52% on the top 10,000
#: (of a 1M universe): a head that a 1k-entry cache can serve a third of, a tail no cache can.
#: Published web/query traces fit 0.6-1.0; prompt traffic, with its templates and retries, sits high.
ZIPF_S = 0.9
#: Keys of the second audience of ``shift``: disjoint from the first's.
SHIFTED = 1 << 40
#: First key made during a run (drift replacements, campaign prompts, scan prompts).
FRESH = 1 << 50

Trace: TypeAlias = "array[int]"  # array('q') of int keys


@functools.lru_cache(maxsize=4)
def _cum_weights(n: int, s: float) -> tuple[float, ...]:
    """Cumulative Zipf weights of ranks 0..n-1 (rank r has weight (r + 1) ** -s); cached: the 1M
    table takes ~0.2 s and every trace uses it."""
    return tuple(itertools.accumulate((r + 1) ** -s for r in range(n)))


def zipf_ranks(rng: random.Random, k: int, n: int = UNIVERSE, s: float = ZIPF_S) -> list[int]:
    """``k`` Zipf(s) draws of ranks in ``[0, n)``, rank 0 the most popular."""
    return rng.choices(range(n), cum_weights=_cum_weights(n, s), k=k)


def zipf(length: int = DEFAULT_LENGTH, seed: int = 1, *, s: float = ZIPF_S, n: int = UNIVERSE) -> Trace:
    """Stable Zipf: the same popularity law for the whole trace (the control).

    Nothing moves, so remembering frequencies forever costs nothing: plain LFU is near its best
    here, and an adaptive policy should not lose much to it (the issue: within 1.6 points)."""
    rng = random.Random(f"zipf:{seed}")
    return array("q", zipf_ranks(rng, length, n, s))


def drift(
    length: int = DEFAULT_LENGTH,
    seed: int = 1,
    *,
    epochs: int = 100,
    replace: float = 0.03,
    head: int = 50_000,
    s: float = ZIPF_S,
    n: int = UNIVERSE,
) -> Trace:
    """Drifting popularity: popular prompts are replaced by new ones over time.

    The trace runs in ``epochs`` equal epochs. At the start of each one, a ``replace`` share of the
    top ``head`` ranks (chosen at random) get brand-new keys; the old key of such a rank is never
    requested again. With the defaults, 3% of the head turns over per 10,000 requests of a 1M
    trace, so ~95% of it by the end (1 - 0.97 ** 100): a product whose templates, FAQs and
    trending questions change over weeks. The tail beyond ``head`` (keys rank >= head) is stable:
    those prompts are mostly one-offs anyway. Frequencies earned by a replaced prompt are dead
    weight, which is what a policy that never forgets keeps."""
    rng = random.Random(f"drift:{seed}")
    ranks = zipf_ranks(rng, length, n, s)
    mapping = list(range(head))  # rank -> key for the head; the tail maps to itself
    fresh = itertools.count(FRESH)
    per_epoch = -(-length // epochs)
    out = array("q")
    n_replace = round(head * replace)
    for start in range(0, length, per_epoch):
        if start:  # the first epoch starts from the original universe
            for rank in rng.sample(range(head), n_replace):
                mapping[rank] = next(fresh)
        chunk = ranks[start : start + per_epoch]
        out.extend([mapping[r] if r < head else r for r in chunk])
    return out


def campaign(
    length: int = DEFAULT_LENGTH,
    seed: int = 1,
    *,
    campaigns: int = 5,
    duration: float = 0.08,
    share: float = 0.3,
    prompts: int = 5_000,
    campaign_s: float = 0.8,
    s: float = ZIPF_S,
    n: int = UNIVERSE,
) -> Trace:
    """Attack-campaign bursts: for a while new prompts take ``share`` of the traffic, then vanish.

    ``campaigns`` campaigns, evenly spaced, each lasting ``duration`` of the trace (8% of 1M: 80,000
    requests). During one, each request is with probability ``share`` (30%) one of the campaign's
    ``prompts`` (5,000) new keys, Zipf(``campaign_s`` = 0.8) among themselves: a jailbreak family
    with a few variants sent over and over and many one-off mutations. The rest is the stable Zipf
    background. After the campaign its prompts never return (the attacker moved on, or the prompt
    was blocked upstream), so the counts they earned are pure pollution for a cache that never
    forgets, and the next campaign's prompts start at zero against them."""
    rng = random.Random(f"campaign:{seed}")
    out = array("q", zipf_ranks(rng, length, n, s))
    span = int(length * duration)
    gap = (length - campaigns * span) // (campaigns + 1)
    fresh = FRESH
    for c in range(campaigns):
        start = gap + c * (span + gap)
        picks = zipf_ranks(rng, span, prompts, campaign_s)
        for i, (u, p) in enumerate(zip((rng.random() for _ in range(span)), picks, strict=True)):
            if u < share:
                out[start + i] = fresh + p
        fresh += prompts
    return out


def scan(
    length: int = DEFAULT_LENGTH,
    seed: int = 1,
    *,
    share: float = 0.3,
    burst: int = 2_000,
    s: float = ZIPF_S,
    n: int = UNIVERSE,
) -> Trace:
    """One-off scans: ``share`` (30%) of requests are unique prompts that never recur.

    Scanners, fuzzers and red-team harnesses send generated prompts, each once. They arrive in runs
    (a scan is a batch): the trace alternates Zipf stretches with runs of ``burst`` (2,000) unique
    keys, where each run is mixed 50/50 with background traffic so the run's length in requests
    is ``2 * burst``, and runs are spaced so the unique keys make ``share`` of the whole trace.
    A policy that admits every miss at the head of its queue (LRU) flushes its working set on each
    run; a frequency filter refuses the one-offs."""
    rng = random.Random(f"scan:{seed}")
    out = array("q", zipf_ranks(rng, length, n, s))
    total_unique = int(length * share)
    runs = max(1, total_unique // burst)
    run_len = 2 * burst
    gap = (length - runs * run_len) // runs
    if gap < 0:
        raise ValueError(f"share={share} is too large for 50/50 scan runs")
    fresh = FRESH
    for r in range(runs):
        start = r * (run_len + gap) + gap // 2
        # exactly ``burst`` positions of this run are scan prompts, at random places within it
        for pos in sorted(rng.sample(range(run_len), burst)):
            out[start + pos] = fresh
            fresh += 1
    return out


def shift(
    length: int = DEFAULT_LENGTH,
    seed: int = 1,
    *,
    at: float = 0.5,
    s: float = ZIPF_S,
    n: int = UNIVERSE,
) -> Trace:
    """Audience shift: at ``at`` (halfway) traffic moves to a disjoint set of prompts.

    Both halves follow the same Zipf law, the second over keys ``SHIFTED + rank``: a new tenant, a
    new product, a new language, or a model upgrade that changed the prompt template (and so every
    key). The issue's sharpest case for plain LFU: the first half's head keeps counts no new prompt
    can reach, so the cache stays full of prompts that will never come again; the last 100,000
    requests show how far from recovered a policy is."""
    rng = random.Random(f"shift:{seed}")
    ranks = zipf_ranks(rng, length, n, s)
    cut = int(length * at)
    out = array("q", ranks[:cut])
    out.extend([SHIFTED + r for r in ranks[cut:]])
    return out


#: The traces by name, in the order the benchmark prints them.
TRACES: dict[str, Callable[..., Trace]] = {
    "zipf": zipf,
    "drift": drift,
    "campaign": campaign,
    "scan": scan,
    "shift": shift,
}


def make(name: str, length: int = DEFAULT_LENGTH, seed: int = 1) -> Trace:
    """The trace ``name`` (a key of :data:`TRACES`) of ``length`` requests."""
    try:
        gen = TRACES[name]
    except KeyError:
        raise ValueError(f"unknown trace {name!r}; known: {', '.join(TRACES)}") from None
    return gen(length, seed)


__all__ = [
    "DEFAULT_LENGTH",
    "FRESH",
    "QUICK_LENGTH",
    "SHIFTED",
    "TRACES",
    "UNIVERSE",
    "ZIPF_S",
    "Trace",
    "campaign",
    "drift",
    "make",
    "scan",
    "shift",
    "zipf",
    "zipf_ranks",
]
