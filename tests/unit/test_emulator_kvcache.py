"""The prefix cache's policy: hash chain, full blocks only, pinning, LRU, reuse modes."""

from __future__ import annotations

import pytest

from guardcache.emulator import PrefixCache
from guardcache.emulator.kvcache import Allocation, chain_keys


def toks(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]


def run(cache: PrefixCache, tokens: list[str], ready_at: float = 0.0) -> Allocation:
    """One request: look up, commit, and keep the blocks pinned (caller releases)."""
    return cache.commit(cache.match(tokens), ready_at)


def served(cache: PrefixCache, tokens: list[str]) -> int:
    """Cached tokens of one complete request."""
    alloc = run(cache, tokens)
    cache.release(alloc)
    return alloc.cached_tokens


def test_keys_form_a_hash_chain_over_full_blocks_only() -> None:
    keys = chain_keys(toks("a", 10), 4)
    assert len(keys) == 2  # the 2-token tail is not a block
    # Same block content after a different first block -> a different key.
    other = chain_keys(["x", "y", "z", "w", *toks("a", 10)[4:8]], 4)
    assert other[1] != keys[1]
    assert chain_keys(toks("a", 8), 4) == keys
    # Token boundaries matter, not just the concatenated text.
    assert chain_keys(["ab", "c", "d", "e"], 4) != chain_keys(["a", "bc", "d", "e"], 4)


def test_a_repeated_prompt_reuses_all_full_blocks_but_never_its_last_token() -> None:
    cache = PrefixCache(block_size=4, capacity_blocks=100, reuse="early")
    assert served(cache, toks("a", 12)) == 0
    assert served(cache, toks("a", 12)) == 8  # (12 - 1) // 4 blocks: one token must be computed
    assert served(cache, toks("a", 13)) == 12
    assert served(cache, toks("a", 3)) == 0  # shorter than a block


def test_only_the_common_full_block_prefix_is_reused() -> None:
    cache = PrefixCache(block_size=4, capacity_blocks=100, reuse="early")
    served(cache, toks("a", 20))
    diverging = toks("a", 10) + toks("b", 10)
    assert served(cache, diverging) == 8  # blocks 0-1 match, block 2 (tokens 8-11) differs


def test_early_reuse_shares_blocks_while_their_request_is_still_running() -> None:
    cache = PrefixCache(block_size=4, capacity_blocks=100, reuse="early")
    first = run(cache, toks("a", 20), ready_at=5.0)
    match = cache.match(toks("a", 20))
    assert match.cached_tokens == 16
    assert match.ready_at == 5.0  # the reuser must wait until the blocks are computed
    cache.release(first)


def test_after_finish_reuse_publishes_blocks_only_when_the_request_ends() -> None:
    cache = PrefixCache(block_size=4, capacity_blocks=100, reuse="after_finish")
    first = run(cache, toks("a", 20))
    assert run(cache, toks("a", 20)).cached_tokens == 0  # cold burst: recomputed
    cache.release(first)
    assert served(cache, toks("a", 20)) == 16


def test_reuse_off_never_caches() -> None:
    cache = PrefixCache(block_size=4, capacity_blocks=100, reuse="off")
    for _ in range(3):
        assert served(cache, toks("a", 20)) == 0
    assert len(cache) == 0


def test_lru_evicts_the_least_recently_released_blocks_first() -> None:
    cache = PrefixCache(block_size=4, capacity_blocks=6, reuse="early")
    served(cache, toks("a", 13))  # 3 blocks
    served(cache, toks("b", 13))  # 3 blocks: full
    served(cache, toks("a", 13))  # touch a: b is now least recently used
    served(cache, toks("c", 13))  # evicts b
    assert cache.stats().evicted_blocks == 3
    assert served(cache, toks("a", 13)) == 12
    assert served(cache, toks("c", 13)) == 12
    assert cache.match(toks("b", 13)).cached_tokens == 0


def test_among_blocks_released_together_the_deepest_are_evicted_first() -> None:
    cache = PrefixCache(block_size=4, capacity_blocks=4, reuse="early")
    served(cache, toks("a", 17))  # 4 blocks
    served(cache, toks("b", 5))  # needs 1 block: evicts a's last block, not its root
    assert cache.match(toks("a", 17)).cached_tokens == 12


def test_pinned_blocks_are_never_evicted() -> None:
    cache = PrefixCache(block_size=4, capacity_blocks=3, reuse="early")
    running = run(cache, toks("a", 13))  # 3 blocks, pinned
    other = run(cache, toks("b", 13))
    assert other.cached_tokens == 0
    assert other.pinned == []  # no room: its blocks are simply not retained
    assert cache.stats().dropped_blocks == 1
    assert cache.stats().pinned_blocks == 3
    cache.release(other)
    cache.release(running)
    assert cache.stats().pinned_blocks == 0
    assert served(cache, toks("b", 13)) == 0  # now it fits, by evicting a
    assert served(cache, toks("b", 13)) == 12


def test_release_is_idempotent() -> None:
    cache = PrefixCache(block_size=4, capacity_blocks=10, reuse="early")
    alloc = run(cache, toks("a", 9))
    cache.release(alloc)
    cache.release(alloc)
    assert cache.stats().pinned_blocks == 0


def test_flush_drops_unpinned_blocks_now_and_pinned_ones_on_release() -> None:
    cache = PrefixCache(block_size=4, capacity_blocks=10, reuse="early")
    served(cache, toks("a", 9))
    running = run(cache, toks("b", 9))
    assert cache.flush() == 2
    assert cache.match(toks("b", 9)).cached_tokens == 0  # flushed even though pinned
    cache.release(running)
    assert len(cache) == 0


def test_commit_refuses_a_stale_match() -> None:
    cache = PrefixCache(block_size=4, capacity_blocks=10, reuse="early")
    stale = cache.match(toks("a", 9))
    served(cache, toks("b", 9))
    with pytest.raises(RuntimeError):
        cache.commit(stale, 0.0)
