"""A block-granular prefix cache, as vLLM and TensorRT-LLM keep their KV cache.

Policy, precisely:

- A prompt is cut into blocks of ``block_size`` tokens; only FULL blocks are ever cached or reused.
- A block is identified by a hash chain, ``key_i = H(key_{i-1}, tokens of block i)``, so a block is
  only reusable after exactly the same preceding tokens.
- A request reuses the longest run of leading blocks present in the cache, but never its last
  token: at least one token must be computed to produce logits, so at most ``(L - 1) // B`` blocks
  are reused (vLLM's ``floor((L-1)/B)*B``). ``cached_tokens = reused_blocks * block_size``.
- ``early`` reuse: a block computed by a request is visible to other requests at once (they wait for
  its ``ready_at`` before their own prefill). ``after_finish``: computed blocks enter the cache only
  when the request that computed them finishes, so a cold burst recomputes the prefix in every
  request. ``off``: nothing is cached.
- Blocks held by a running request are pinned (reference counted). Capacity counts cached blocks;
  when it is full, the least recently released unpinned block is evicted. Among blocks released
  together the deepest go first, so a shared root outlives its leaves. If every block is pinned a
  newly computed block is simply not retained.

Not thread-safe: one emulator instance drives it from its event loop.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from .config import ReuseMode


@dataclass(slots=True)
class _Block:
    key: bytes
    ref_count: int = 0
    ready_at: float = 0.0
    doomed: bool = False  # flushed while pinned: dropped when its last user releases it


@dataclass(frozen=True, slots=True)
class Match:
    """Result of a lookup; pass it to ``commit`` before the cache changes (no await in between)."""

    keys: tuple[bytes, ...]  # hash chain of every full block of the prompt
    hit_blocks: int
    ready_at: float  # when the last reused block has been computed; 0.0 when none is reused
    block_size: int
    version: int

    @property
    def cached_tokens(self) -> int:
        return self.hit_blocks * self.block_size


@dataclass(slots=True)
class Allocation:
    """The blocks one request holds; ``PrefixCache.release`` frees them exactly once."""

    pinned: list[bytes]  # reused or newly inserted blocks, pinned by this request
    private: list[bytes]  # computed blocks waiting for the request to finish (after_finish)
    cached_tokens: int
    released: bool = False


@dataclass(frozen=True, slots=True)
class KVCacheStats:
    """A snapshot of the cache, as reported in ``/admin/stats`` under ``kv_cache``."""

    reuse: str
    block_size: int
    capacity_blocks: int
    blocks: int
    pinned_blocks: int
    lookups: int
    hit_blocks: int
    evicted_blocks: int
    dropped_blocks: int


def chain_keys(tokens: Sequence[str], block_size: int) -> tuple[bytes, ...]:
    """Hash-chain keys of the full blocks of ``tokens`` (a partial tail block has no key).

    Each block is hashed as its parent's key plus the JSON list of its tokens: an unambiguous
    encoding made in one C call per block (per-token updates cost ~0.5 ms a request, most of the
    emulator's CPU).
    """
    keys: list[bytes] = []
    parent = b""
    dumps = json.dumps
    for start in range(0, len(tokens) - block_size + 1, block_size):
        block = dumps(tokens[start : start + block_size], ensure_ascii=False).encode("utf-8")
        parent = hashlib.blake2b(parent + block, digest_size=16).digest()
        keys.append(parent)
    return tuple(keys)


class PrefixCache:
    """Full-block prefix cache with pinning and LRU eviction of unpinned blocks (see module doc)."""

    def __init__(self, block_size: int, capacity_blocks: int, reuse: ReuseMode) -> None:
        if block_size < 1 or capacity_blocks < 0:
            raise ValueError("block_size must be >= 1 and capacity_blocks >= 0")
        self.block_size = block_size
        self.capacity_blocks = capacity_blocks
        self.reuse: ReuseMode = reuse
        self._blocks: dict[bytes, _Block] = {}
        self._lru: OrderedDict[bytes, None] = OrderedDict()  # unpinned blocks, oldest first
        self._version = 0
        self._lookups = 0
        self._hit_blocks = 0
        self._evicted = 0
        self._dropped = 0

    def __len__(self) -> int:
        return len(self._blocks)

    def match(self, tokens: Sequence[str]) -> Match:
        """Find the reusable prefix of ``tokens`` without changing the cache."""
        keys = chain_keys(tokens, self.block_size)
        hits = 0
        ready_at = 0.0
        if self.reuse != "off":
            limit = max(0, (len(tokens) - 1) // self.block_size)
            for key in keys[:limit]:
                block = self._blocks.get(key)
                if block is None or block.doomed:
                    break
                hits += 1
                ready_at = max(ready_at, block.ready_at)
        return Match(keys, hits, ready_at, self.block_size, self._version)

    def commit(self, match: Match, ready_at: float) -> Allocation:
        """Pin the reused blocks and register the computed ones (ready at ``ready_at``)."""
        if match.version != self._version:
            raise RuntimeError("PrefixCache changed between match() and commit()")
        self._version += 1
        self._lookups += 1
        self._hit_blocks += match.hit_blocks
        alloc = Allocation(pinned=[], private=[], cached_tokens=match.cached_tokens)
        if self.reuse == "off":
            return alloc
        for key in match.keys[: match.hit_blocks]:
            self._pin(self._blocks[key])
            alloc.pinned.append(key)
        for key in match.keys[match.hit_blocks :]:
            if self.reuse == "after_finish":
                alloc.private.append(key)
                continue
            block = self._blocks.get(key)
            if block is None or block.doomed:
                block = self._insert(key, ready_at)
                if block is None:
                    break  # cache full of pinned blocks: the rest of the chain is not retained
            self._pin(block)
            alloc.pinned.append(key)
        return alloc

    def release(self, alloc: Allocation) -> None:
        """Unpin the request's blocks and, in ``after_finish`` mode, publish what it computed."""
        if alloc.released:
            return
        alloc.released = True
        self._version += 1
        # Deepest first, so among blocks released together the leaves are the oldest in LRU order.
        for key in reversed(alloc.pinned):
            block = self._blocks.get(key)
            if block is None:
                continue
            block.ref_count -= 1
            if block.ref_count == 0:
                if block.doomed:
                    del self._blocks[key]
                else:
                    self._lru[key] = None
        published: list[bytes] = []
        for key in alloc.private:
            existing = self._blocks.get(key)
            if existing is not None and not existing.doomed:
                continue
            if self._insert(key, 0.0) is None:
                break
            published.append(key)
        for key in reversed(published):
            self._lru[key] = None

    def flush(self) -> int:
        """Drop every cached block; pinned ones go as soon as their requests release them."""
        self._version += 1
        dropped = 0
        for key, block in list(self._blocks.items()):
            if block.ref_count == 0:
                del self._blocks[key]
                dropped += 1
            else:
                block.doomed = True
        self._lru.clear()
        return dropped

    def reset_counters(self) -> None:
        self._lookups = self._hit_blocks = self._evicted = self._dropped = 0

    def stats(self) -> KVCacheStats:
        pinned = sum(1 for b in self._blocks.values() if b.ref_count > 0)
        return KVCacheStats(
            reuse=self.reuse,
            block_size=self.block_size,
            capacity_blocks=self.capacity_blocks,
            blocks=len(self._blocks),
            pinned_blocks=pinned,
            lookups=self._lookups,
            hit_blocks=self._hit_blocks,
            evicted_blocks=self._evicted,
            dropped_blocks=self._dropped,
        )

    def contains(self, key: bytes) -> bool:
        """Whether a (non-flushed) block with this key is cached; for tests and debugging."""
        block = self._blocks.get(key)
        return block is not None and not block.doomed

    def _pin(self, block: _Block) -> None:
        if block.ref_count == 0:
            self._lru.pop(block.key, None)
        block.ref_count += 1

    def _insert(self, key: bytes, ready_at: float) -> _Block | None:
        old = self._blocks.get(key)
        if old is not None:  # a doomed block being recomputed: it is replaced once unpinned
            if old.ref_count == 0:
                del self._blocks[key]
            else:
                old.doomed = False
                old.ready_at = ready_at
                return old
        while len(self._blocks) >= self.capacity_blocks:
            if not self._lru:
                self._dropped += 1
                return None
            victim, _ = self._lru.popitem(last=False)
            del self._blocks[victim]
            self._evicted += 1
        block = _Block(key, 0, ready_at)
        self._blocks[key] = block
        return block
