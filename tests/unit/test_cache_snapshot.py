"""Warm restarts: a policy's state exported and restored (eviction order, counts, TinyLFU's queues,
sketch and climber), and the signed snapshot file (what is loaded, what is refused, with one WARNING
line saying why). The whole path through LLMRails is tests/integration/test_cache_snapshot.py."""

from __future__ import annotations

import logging
import os
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from guardcache.cache import LFUCache, PolicyCache, TinyLFUCache
from guardcache.cache.snapshot import Snapshotter
from guardcache.cache.snapshot_format import max_file_bytes
from tests.unit.cache_support import BusyCache

KEY = b"k" * 32
IDENTITY = {"model_type": "content_safety", "model": "m", "version": None, "namespaces": ["aa", "bb"]}
LOGGER = "guardcache.cache.snapshot"


class BytesCodec:
    """Values are bytes already (what a codec gives the file); anything else is unreadable."""

    @staticmethod
    def encode(value: Any) -> bytes:
        return bytes(value)

    @staticmethod
    def decode(data: bytes) -> Any:
        return None if data.startswith(b"old:") else data


CACHES = [LFUCache, TinyLFUCache, BusyCache]


def trace(seed: int, n: int, keys: int = 4000) -> list[bytes]:
    """A skewed trace of 32-byte keys (a head asked for often, a long tail), as guard traffic is."""
    rng = random.Random(seed)
    return [int(rng.paretovariate(0.9) * 7 % keys).to_bytes(32, "big") for _ in range(n)]


def run(cache: PolicyCache, keys: list[bytes]) -> int:
    """Get-or-put each key; the hits."""
    hits = 0
    for key in keys:
        if cache.get(key) is None:
            cache.put(key, b"v" + key[-4:])
        else:
            hits += 1
    return hits


def filled(cls: type[PolicyCache], maxsize: int = 300) -> PolicyCache:
    cache = cls(maxsize)
    run(cache, trace(1, 20_000))
    return cache


@pytest.mark.parametrize("cls", CACHES)
def test_a_restored_cache_evicts_as_the_original_would(cls: type[PolicyCache]) -> None:
    a = filled(cls)
    b = cls(a.maxsize)
    state = a.export_state()
    assert b.restore_state(state) == len(a)
    assert b.keys_in_eviction_order() == a.keys_in_eviction_order()
    # What the policy keeps beside its entries (TinyLFU: the sketch, the queues' limits, where the
    # aging and climbing periods stand, the climber, the admission's random state) came back whole.
    assert b.export_state().extra == state.extra
    for key in a.keys_in_eviction_order():
        ea, eb = a.entry(key), b.entry(key)
        assert ea is not None and eb is not None
        assert (eb.value, eb.frequency) == (ea.value, ea.frequency)
        assert eb.created_at == pytest.approx(ea.created_at) and eb.accessed_at == pytest.approx(
            ea.accessed_at
        )
    # The same traffic afterwards: the same hits, the same evictions, the same order at the end
    # (TinyLFU's queues, limits, sketch, aging and climbing periods came back too).
    more = trace(2, 20_000)
    assert run(b, more) == run(a, more)
    assert b.keys_in_eviction_order() == a.keys_in_eviction_order()
    if isinstance(a, TinyLFUCache) and isinstance(b, TinyLFUCache):
        assert b.sizes() == a.sizes()


@pytest.mark.parametrize("cls", CACHES)
def test_restored_entries_count_as_puts_and_nothing_else(cls: type[PolicyCache]) -> None:
    a = filled(cls)
    b = cls(a.maxsize)
    b.restore_state(a.export_state())
    stats = b.get_stats()
    assert (stats.hits, stats.misses, stats.evictions, stats.updates) == (0, 0, 0, 0)
    assert stats.puts == stats.current_size == len(a)


@pytest.mark.parametrize("cls", CACHES)
def test_a_smaller_cache_keeps_the_safest_entries(cls: type[PolicyCache]) -> None:
    a = filled(cls)
    b = cls(100)
    assert b.restore_state(a.export_state()) == 100
    assert set(b.keys_in_eviction_order()) == set(a.keys_in_eviction_order()[-100:])
    run(b, trace(3, 5_000))  # and it works on: its queues were brought within its own limits
    assert len(b) == 100
    if isinstance(b, TinyLFUCache):
        sizes = b.sizes()
        assert sizes.window <= sizes.window_max and sizes.protected <= sizes.protected_max


@pytest.mark.parametrize("cls", CACHES)
def test_a_state_restores_into_an_empty_cache_only(cls: type[PolicyCache]) -> None:
    a = filled(cls)
    b = cls(a.maxsize)
    b.put(b"x" * 32, b"v")
    with pytest.raises(ValueError, match="empty"):
        b.restore_state(a.export_state())
    assert b.keys_in_eviction_order() == [b"x" * 32]


def test_lfu_export_lists_groups_least_recent_first() -> None:
    cache = LFUCache(10)
    for key in (b"a", b"b", b"c"):
        cache.put(key, key)
    cache.get(b"a")
    state = cache.export_state()
    assert state.keys == [b"b", b"c", b"a"] == cache.keys_in_eviction_order()
    assert state.frequency == [1, 1, 2]


# -- the file ---------------------------------------------------------------------------------


def snapshotter(cache: PolicyCache, path: Path, **changes: Any) -> Snapshotter:
    options: dict[str, Any] = {
        "key": KEY,
        "identity": IDENTITY,
        "codec": BytesCodec,
        "interval": 300.0,
        "where": "config.yml: models[0].cache.snapshot",
    }
    options.update(changes)
    return Snapshotter(cache, str(path), **options)


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno >= logging.WARNING]


def written(tmp_path: Path, cls: type[PolicyCache] = TinyLFUCache) -> tuple[PolicyCache, Path]:
    cache = filled(cls)
    path = tmp_path / "cs.snapshot"
    assert snapshotter(cache, path).save()
    return cache, path


@pytest.mark.parametrize("cls", CACHES)
def test_a_file_round_trip_restores_the_order(
    tmp_path: Path, cls: type[PolicyCache], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    cache, path = written(tmp_path, cls)
    fresh = cls(cache.maxsize)
    assert snapshotter(fresh, path).load() == len(cache)
    assert fresh.keys_in_eviction_order() == cache.keys_in_eviction_order()
    assert warnings(caplog) == []
    assert oct(os.stat(path).st_mode & 0o777) == oct(0o600)  # verdicts are nobody else's to read
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def refused(
    path: Path, caplog: pytest.LogCaptureFixture, cls: type[PolicyCache] = TinyLFUCache, **changes: Any
) -> str:
    """Load ``path`` into a new cache: it must stay empty, with exactly one WARNING; that line."""
    caplog.clear()
    caplog.set_level(logging.INFO, LOGGER)
    fresh = cls(300)
    assert snapshotter(fresh, path, **changes).load() == 0
    assert len(fresh) == 0
    (line,) = warnings(caplog)
    assert "config.yml: models[0].cache.snapshot" in line and "not loaded" in line
    return line


def test_a_file_with_any_byte_changed_loads_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    _, path = written(tmp_path)
    original = path.read_bytes()
    # The preamble's length field, the header, a key, a value, a column, the tag itself.
    for at in (12, 40, len(original) // 3, len(original) // 2, len(original) - 200, len(original) - 1):
        data = bytearray(original)
        data[at] ^= 0x01
        path.write_bytes(bytes(data))
        line = refused(path, caplog)
        assert "signature" in line or "truncated" in line or "after its end" in line, line


def test_a_verdict_planted_in_the_file_is_never_served(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cache = LFUCache(10)
    cache.put(b"h" * 32, b"unsafe")
    path = tmp_path / "cs.snapshot"
    assert snapshotter(cache, path).save()
    path.write_bytes(path.read_bytes().replace(b"unsafe", b"safe!!"))
    assert "signature does not match" in refused(path, caplog, LFUCache)


def test_another_key_loads_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    _, path = written(tmp_path)
    assert "signature does not match" in refused(path, caplog, key=b"o" * 32)


def test_a_truncated_file_loads_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    _, path = written(tmp_path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    assert "truncated" in refused(path, caplog)
    path.write_bytes(data[:5])
    assert "foreign" in refused(path, caplog)


def test_a_foreign_file_loads_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "cs.snapshot"
    path.write_bytes(b'{"not": "a snapshot"}\n')
    assert "foreign" in refused(path, caplog)


def test_another_format_version_loads_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    _, path = written(tmp_path)
    data = bytearray(path.read_bytes())
    data[8] = 2  # the format version, after the magic
    path.write_bytes(bytes(data))
    assert "format 2" in refused(path, caplog)


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("version", "2025-06", "cache.version"),
        ("namespaces", ["aa", "cc"], "template"),
        ("model", "another", "another model"),
    ],
)
def test_a_file_of_another_namespace_loads_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, field: str, value: Any, says: str
) -> None:
    _, path = written(tmp_path)
    assert says in refused(path, caplog, identity={**IDENTITY, field: value})


def test_a_file_of_another_policy_loads_nothing(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    _, path = written(tmp_path, TinyLFUCache)
    assert "policy" in refused(path, caplog, LFUCache)


def test_a_file_too_large_for_maxsize_is_not_read(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "cs.snapshot"
    with open(path, "wb") as f:
        f.truncate(max_file_bytes(300) + 1)  # sparse: no disk used
    assert "more than a cache of maxsize 300 reads" in refused(path, caplog)


def test_values_the_codec_no_longer_reads_are_left_out(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    cache = LFUCache(10)
    cache.put(b"a" * 32, b"old:1")
    cache.put(b"b" * 32, b"new")
    path = tmp_path / "cs.snapshot"
    assert snapshotter(cache, path).save()
    fresh = LFUCache(10)
    assert snapshotter(fresh, path).load() == 1
    assert fresh.get(b"b" * 32) == b"new" and fresh.get(b"a" * 32) is None
    assert warnings(caplog) == []


def test_a_missing_file_is_a_cold_start_without_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    assert snapshotter(LFUCache(10), tmp_path / "none").load() == 0
    assert warnings(caplog) == []
    assert any("starting cold" in r.getMessage() for r in caplog.records)


def test_an_unwritable_path_warns_once_and_never_raises(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, LOGGER)
    cache = filled(LFUCache)
    s = snapshotter(cache, tmp_path / "missing-folder" / "cs.snapshot")
    assert s.writable() is not None and "does not exist" in s.writable()  # type: ignore[operator]
    assert s.save() is False
    assert s.save() is False
    (line,) = warnings(caplog)
    assert "config.yml: models[0].cache.snapshot" in line and "not written" in line
    s.close()  # a last failed write at close raises nothing either


def test_one_process_writes_a_shared_file(tmp_path: Path) -> None:
    """Two writers of one path (``serve --workers 2``): the first to write holds the lock, the other
    writes nothing until the first closes."""
    path = tmp_path / "cs.snapshot"
    first, second = snapshotter(filled(LFUCache), path), snapshotter(LFUCache(10), path)
    assert first.save()
    assert second.save() is False
    first.close(save=False)
    assert second.save()
    second.close(save=False)


def test_the_schedule_writes_in_the_background(tmp_path: Path) -> None:
    path = tmp_path / "cs.snapshot"
    cache = filled(LFUCache)
    s = snapshotter(cache, path, interval=0.01)
    s.start()
    wait_for(path.exists)
    s.close(save=False)
    fresh = LFUCache(cache.maxsize)
    assert snapshotter(fresh, path).load() > 0


def wait_for(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met"
        time.sleep(0.005)
