"""Stats: counting rules, the exact log line, and periodic reporting with a fake clock."""

from __future__ import annotations

import gc
import logging

import pytest

from guardcache.cache import CacheStats, LFUCache, StatsReporter
from tests.clocks import FakeClock

LOGGER = "guardcache.cache.lfu"


def test_hit_rate_is_hits_over_lookups_and_contains_counts_nothing() -> None:
    c = LFUCache(10, track_stats=True)
    c.put("a", 1)
    c.get("a")
    c.get("b")
    c.contains("a")
    c.contains("zzz")
    s = c.get_stats()
    assert (s.hits, s.misses, s.lookups, s.hit_rate) == (1, 1, 2, 0.5)


@pytest.mark.parametrize(
    ("hits", "misses", "text"),
    [(0, 0, "0.00%"), (1, 1, "50.00%"), (2, 1, "66.67%"), (3, 0, "100.00%"), (15234, 2456, "86.12%")],
)
def test_log_line_percentages(hits: int, misses: int, text: str) -> None:
    s = CacheStats(hits=hits, misses=misses, current_size=2456, maxsize=10000, puts=2456)
    assert f"Hit Rate: {text} |" in s.format_line()


def test_log_line_has_the_exact_form(caplog: pytest.LogCaptureFixture) -> None:
    c = LFUCache(4, track_stats=True)
    for k in "abc":
        c.put(k, k)
    c.get("a")
    c.get("a")
    c.get("x")
    c.put("a", "again")
    c.put("d", 1)
    c.put("e", 1)  # evicts b
    with caplog.at_level(logging.INFO, logger=LOGGER):
        c.log_stats_now()
    assert caplog.records[-1].name == LOGGER
    assert caplog.records[-1].levelno == logging.INFO
    assert caplog.records[-1].getMessage() == (
        "LFU Cache Statistics - Size: 4/4 | Hits: 2 | Misses: 1 | Hit Rate: 66.67% | "
        "Evictions: 1 | Puts: 5 | Updates: 1"
    )


def test_reset_zeroes_counters_but_keeps_entries() -> None:
    c = LFUCache(4, track_stats=True)
    c.put("a", 1)
    c.get("a")
    c.reset_stats()
    s = c.get_stats()
    assert (s.hits, s.misses, s.puts, s.current_size) == (0, 0, 0, 1)


def test_stats_are_a_value_you_can_diff_and_index() -> None:
    c = LFUCache(4, track_stats=True)
    c.put("a", 1)
    before = c.get_stats()
    c.get("a")
    c.get("b")
    delta = c.get_stats() - before
    assert (delta.hits, delta.misses, delta.puts) == (1, 1, 0)
    assert before["capacity"] == 4 and before["hit_rate"] == 0.0
    assert before.as_dict()["current_size"] == 1


def test_periodic_logging_with_a_fake_clock(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    reporter = StatsReporter(clock=clock, start_thread=False)
    c = LFUCache(10, track_stats=True, stats_logging_interval=60.0, reporter=reporter)
    assert c.supports_stats_logging()
    with caplog.at_level(logging.INFO, logger=LOGGER):
        assert reporter.run_pending() == pytest.approx(60.0)
        assert not caplog.records
        clock.now += 59.9
        reporter.run_pending()
        assert not caplog.records
        clock.now += 0.1  # due now, although the cache was idle all along
        reporter.run_pending()
        assert len(caplog.records) == 1
        clock.now += 600  # a stall: one line, not ten
        reporter.run_pending()
        assert len(caplog.records) == 2
    assert all(r.getMessage().startswith("LFU Cache Statistics - Size: 0/10") for r in caplog.records)


def test_closed_or_collected_caches_stop_reporting(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    reporter = StatsReporter(clock=clock, start_thread=False)
    closed = LFUCache(1, track_stats=True, stats_logging_interval=1.0, reporter=reporter)
    collected = LFUCache(2, track_stats=True, stats_logging_interval=1.0, reporter=reporter)
    assert reporter.scheduled() == 2
    closed.close()
    del collected
    gc.collect()
    clock.now += 5
    with caplog.at_level(logging.INFO, logger=LOGGER):
        assert reporter.run_pending() is None
    assert not caplog.records
    assert reporter.scheduled() == 0


def test_no_interval_means_no_schedule_and_no_thread_per_cache() -> None:
    reporter = StatsReporter(start_thread=False)
    c = LFUCache(1, track_stats=True, reporter=reporter)
    assert not c.supports_stats_logging()
    assert reporter.scheduled() == 0
    with pytest.raises(ValueError):
        LFUCache(1, track_stats=True, stats_logging_interval=0)


def test_the_shared_reporter_thread_logs_periodically(caplog: pytest.LogCaptureFixture) -> None:
    import threading
    import time

    reporter = StatsReporter()
    with caplog.at_level(logging.INFO, logger=LOGGER):
        caches = [
            LFUCache(n, track_stats=True, stats_logging_interval=0.05, reporter=reporter) for n in (1, 2)
        ]
        expected = {"LFU Cache Statistics - Size: 0/1", "LFU Cache Statistics - Size: 0/2"}

        def logged() -> set[str]:
            return {r.getMessage().split(" | ")[0] for r in caplog.records}

        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not logged() >= expected:
            time.sleep(0.02)
    assert logged() >= expected
    assert sum(t.name == "guardcache-stats" for t in threading.enumerate()) >= 1
    for c in caches:
        c.close()
