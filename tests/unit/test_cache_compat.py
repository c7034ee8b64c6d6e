"""What NeMo Guardrails' actions and users rely on: a truthy cache, dict-valued stats, the interface's
optional methods, and the stats line written on access. (NeMo's own tests: tests/nemo_compat.)"""

from __future__ import annotations

import copy
import json
import logging
import pickle
import threading
import time
from collections.abc import Hashable
from typing import Any

import pytest

from guardcache.cache import CacheInterface, CacheStats, LFUCache, StatsReporter
from guardcache.cache.interface import NO_STATS_MESSAGE
from guardcache.cache.stats import LINE_FORMAT

LOGGER = "guardcache.cache.lfu"


class DictCache(CacheInterface):
    """Only what the interface requires, plus a __len__ (which would make it falsy when empty)."""

    def __init__(self) -> None:
        self.data: dict[Hashable, Any] = {}

    def get(self, key: Hashable, default: Any = None) -> Any:
        return self.data.get(key, default)

    def put(self, key: Hashable, value: Any) -> None:
        self.data[key] = value

    def size(self) -> int:
        return len(self.data)

    def __len__(self) -> int:
        return len(self.data)

    def clear(self) -> None:
        self.data.clear()

    @property
    def maxsize(self) -> int:
        return 10


# -- truthiness ---------------------------------------------------------------------------------


@pytest.mark.parametrize("cache", [LFUCache(3), LFUCache(0), DictCache()], ids=["lfu", "lfu0", "minimal"])
def test_an_empty_cache_is_truthy_and_len_is_still_the_size(cache: CacheInterface) -> None:
    assert bool(cache) is True
    assert len(cache) == 0  # type: ignore[arg-type]
    cache.put("k", 1)
    assert bool(cache) is True


def test_nemo_style_if_cache_uses_an_empty_cache() -> None:
    model_caches = {"content_safety": LFUCache(10)}
    cache = model_caches.get("content_safety") if model_caches else None
    if cache:  # NeMo's actions skip caching entirely when this is false
        cache.put("key", {"result": {"allowed": True}})
    assert cache is not None and cache.get("key") == {"result": {"allowed": True}}


# -- stats as a dict ------------------------------------------------------------------------------


def test_get_stats_is_a_dict_with_attribute_access() -> None:
    c = LFUCache(4, track_stats=True)
    c.put("a", 1)
    c.get("a")
    c.get("b")
    s = c.get_stats()
    assert isinstance(s, dict) and isinstance(s, CacheStats)
    assert dict(s) == {
        "hits": 1,
        "misses": 1,
        "evictions": 0,
        "puts": 1,
        "updates": 0,
        "coalesced": 0,
        "current_size": 1,
        "maxsize": 4,
        "hit_rate": 0.5,
        "capacity": 4,
        "load_success": 0,
        "load_failure": 0,
        "total_load_time": 0.0,
        "average_load_penalty": 0.0,
        "expirations": 0,
    }
    for name in (
        *("hits", "misses", "evictions", "puts", "updates", "coalesced", "current_size", "maxsize"),
        *("load_success", "load_failure", "total_load_time", "average_load_penalty", "expirations"),
    ):
        assert getattr(s, name) == s[name]
    assert s.hit_rate == s["hit_rate"] == 0.5 and s.lookups == 2
    assert json.loads(json.dumps(s)) == dict(s)
    assert s.as_dict() == dict(s) and type(s.as_dict()) is dict


def test_stats_stay_a_value() -> None:
    s = CacheStats(hits=2, misses=1, puts=3, current_size=3, maxsize=8)
    for change in (
        lambda: s.__setitem__("hits", 0),
        lambda: s.__delitem__("hits"),
        lambda: s.update(hits=0),
        lambda: s.pop("hits"),
        lambda: s.popitem(),
        lambda: s.setdefault("x", 1),
        s.clear,
    ):
        with pytest.raises(TypeError, match="read-only"):
            change()
    with pytest.raises(AttributeError):
        s.hits = 5  # type: ignore[misc]
    assert s["hits"] == 2
    same = CacheStats(hits=2, misses=1, puts=3, current_size=3, maxsize=8)
    assert s == same and hash(s) == hash(same) and len({s, same}) == 1
    for twin in (copy.copy(s), copy.deepcopy(s), pickle.loads(pickle.dumps(s))):
        assert twin == s and type(twin) is CacheStats
    mutable = dict(s)
    mutable["note"] = "mine"
    assert "note" not in s
    assert repr(s).startswith("CacheStats(hits=2, misses=1, ")


def test_windows_by_subtraction_and_sums_by_addition() -> None:
    c = LFUCache(4, track_stats=True)
    c.put("a", 1)
    before = c.get_stats()
    c.get("a")
    c.get("zz")
    window = c.get_stats() - before
    assert (window.hits, window.misses, window.puts, window["hit_rate"]) == (1, 1, 0, 0.5)
    both = before + window
    assert both["maxsize"] == 8 and both.hits == 1


# -- the interface's defaults ---------------------------------------------------------------------


def test_interface_defaults_for_a_minimal_store() -> None:
    c = DictCache()
    assert c.is_empty() and not c.contains("k")
    c.put("k", None)  # None is a value, not "absent"
    assert c.contains("k") and not c.is_empty()
    stats = c.get_stats()
    assert dict(stats) == {"message": NO_STATS_MESSAGE}
    assert stats.hits == 0 and stats.hit_rate == 0.0
    c.reset_stats()
    c.log_stats_now()
    assert c.supports_stats_logging() is False


async def test_default_get_or_compute_stores_results_and_raises_without_a_default() -> None:
    c = DictCache()
    calls = 0

    def compute() -> str:
        nonlocal calls
        calls += 1
        return "v"

    assert await c.get_or_compute("k", compute) == "v"
    assert await c.get_or_compute("k", compute) == "v" and calls == 1

    async def fail() -> str:
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        await c.get_or_compute("x", fail)
    assert await c.get_or_compute("x", fail, default=None) is None
    assert not c.contains("x")


# -- logging --------------------------------------------------------------------------------------


def test_log_stats_now_logs_nemo_style_only_when_tracking(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger=LOGGER):
        LFUCache(3).log_stats_now()
        assert not caplog.records
        LFUCache(3, track_stats=True).log_stats_now()
    (record,) = caplog.records
    assert record.msg == LINE_FORMAT
    assert record.args == (
        "Size: 0/3 | Hits: 0 | Misses: 0 | Hit Rate: 0.00% | Evictions: 0 | Puts: 0 | Updates: 0",
    )
    assert record.getMessage() == CacheStats(maxsize=3).format_line()


class WallClock:
    """Stands in for time.time (the on-access schedule reads it, as NeMo's does)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.now = 1_000_000.0
        monkeypatch.setattr(time, "time", lambda: self.now)


def test_caches_without_an_interval_or_with_a_reporter_keep_the_bare_hot_paths() -> None:
    reporter = StatsReporter(start_thread=False)
    for c in (
        LFUCache(3),
        LFUCache(3, track_stats=True),
        LFUCache(3, stats_logging_interval=1.0),  # no tracking: no logging
        LFUCache(3, track_stats=True, stats_logging_interval=1.0, reporter=reporter),
    ):
        assert c.get.__qualname__ == "hot_paths.<locals>.get"
        assert c.put.__qualname__ == "hot_paths.<locals>.put"
    logged = LFUCache(3, track_stats=True, stats_logging_interval=1.0)
    assert logged.get.__qualname__ == "with_line_check.<locals>.checked_get"
    assert reporter.scheduled() == 1


def test_on_access_the_first_call_after_the_interval_logs_the_state_before_it(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    clock = WallClock(monkeypatch)
    c = LFUCache(5, track_stats=True, stats_logging_interval=10.0)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        c.put("a", 1)
        clock.now += 9.99
        c.get("a")
        assert not caplog.records
        clock.now += 0.01
        c.get("b")  # due: the line shows the state before this miss
        assert [r.getMessage() for r in caplog.records] == [
            "LFU Cache Statistics - Size: 1/5 | Hits: 1 | Misses: 0 | Hit Rate: 100.00% | "
            "Evictions: 0 | Puts: 1 | Updates: 0"
        ]
        c.put("c", 3)
        clock.now += 9.0
        c.get("a")
        assert len(caplog.records) == 1  # the next interval counts from that line
        clock.now += 1.0
        c.put("d", 4)
        assert len(caplog.records) == 2
        clock.now += 1000.0  # idle for long: one line on the next call, not a hundred
        c.get("a")
        c.get("a")
        assert len(caplog.records) == 3


def test_on_access_log_stats_now_restarts_the_interval_and_close_stops_it(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    clock = WallClock(monkeypatch)
    c = LFUCache(5, track_stats=True, stats_logging_interval=10.0)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        clock.now += 8.0
        c.log_stats_now()
        clock.now += 8.0
        c.get("a")
        assert len(caplog.records) == 1
        clock.now += 2.0
        c.get("a")
        assert len(caplog.records) == 2
        c.close()
        clock.now += 100.0
        c.get("a")
        c.put("a", 1)
        assert len(caplog.records) == 2
        c.log_stats_now()  # still there on demand
        assert len(caplog.records) == 3


def test_on_access_a_clock_that_goes_back_restarts_the_interval(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    clock = WallClock(monkeypatch)
    c = LFUCache(5, track_stats=True, stats_logging_interval=10.0)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        clock.now -= 3600.0  # e.g. a step of the system clock
        c.get("a")
        clock.now += 9.0
        c.get("a")
        assert not caplog.records
        clock.now += 1.0
        c.get("a")
        assert len(caplog.records) == 1


async def test_on_access_get_or_compute_also_writes_the_line(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    clock = WallClock(monkeypatch)
    c = LFUCache(5, track_stats=True, stats_logging_interval=10.0)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        assert await c.get_or_compute("k", lambda: 1) == 1
        clock.now += 10.0
        assert await c.get_or_compute("k", lambda: 2) == 1
        assert len(caplog.records) == 1
        clock.now += 10.0
        assert c.get_or_compute_sync("j", lambda: 3) == 3
        assert len(caplog.records) == 2
    assert c.get_stats().puts == 2  # the single flight stored through the bare put


def test_on_access_concurrent_callers_write_one_line(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    clock = WallClock(monkeypatch)
    c = LFUCache(100, track_stats=True, stats_logging_interval=10.0)
    for i in range(50):
        c.put(i, i)
    clock.now += 11.0
    n = 8
    barrier = threading.Barrier(n)
    errors: list[BaseException] = []

    def worker(t: int) -> None:
        try:
            barrier.wait()
            for i in range(200):
                c.get(i % 50)
                c.put(1000 + t * 1000 + i, i)
        except BaseException as exc:
            errors.append(exc)

    with caplog.at_level(logging.INFO, logger=LOGGER):
        threads = [threading.Thread(target=worker, args=(t,)) for t in range(n)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
    assert not errors
    assert len(caplog.records) == 1
    s = c.get_stats()
    assert s.hits == n * 200 and s.current_size == 100
