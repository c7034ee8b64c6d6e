"""Retry warnings are rate-limited: one line per interval, with a count of the ones left out."""

from __future__ import annotations

import logging

import pytest

from guardcache.llm.logs import RateLimitedLog
from tests.clocks import FakeClock
from tests.unit.test_llm_client import MESSAGES, Script, ok

LOGGER = "guardcache.test.ratelimit"


def test_the_first_line_is_written_and_the_next_ones_are_counted_into_the_following(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    log = RateLimitedLog(logging.getLogger(LOGGER), interval=10.0, clock=clock)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert log.warning("call to %s failed", "u1")
        for _ in range(5):
            clock.now += 1.0
            assert not log.warning("call to %s failed", "u1")
        clock.now += 5.0  # 10 s after the first line
        assert log.warning("call to %s failed", "u1")
        clock.now += 10.0
        assert log.warning("call to %s failed", "u1")
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "call to u1 failed",
        "call to u1 failed; 5 similar lines suppressed in the last 10 s",
        "call to u1 failed",
    ]
    assert log.emitted == 3


def test_nothing_is_counted_when_the_level_is_off() -> None:
    logger = logging.getLogger(LOGGER + ".off")
    logger.setLevel(logging.ERROR)
    log = RateLimitedLog(logger, interval=10.0)
    assert not log.warning("x")
    assert log.emitted == 0


def test_a_negative_interval_is_rejected() -> None:
    with pytest.raises(ValueError, match="interval"):
        RateLimitedLog(logging.getLogger(LOGGER), interval=-1)


async def test_an_outage_writes_one_retry_line_per_interval_not_one_per_retry(
    caplog: pytest.LogCaptureFixture,
) -> None:
    script = Script(503)
    with caplog.at_level(logging.WARNING, logger="guardcache.llm.client"):
        async with script.client() as client:
            for _ in range(20):
                with pytest.raises(Exception, match="HTTP 503"):
                    await client.complete(MESSAGES)
    assert len(script.requests) == 60  # every call still retried twice
    (record,) = caplog.records
    assert "HTTP 503" in record.getMessage() and "retrying in" in record.getMessage()


async def test_a_retry_line_after_the_interval_says_how_many_were_left_out(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    script = Script(503, ok())
    with caplog.at_level(logging.WARNING, logger="guardcache.llm.client"):
        async with script.client() as client:
            client.retry_log = RateLimitedLog(client.retry_log.logger, interval=10.0, clock=clock)
            for _ in range(4):
                script.steps = [503, ok()]
                await client.complete(MESSAGES)
            clock.now += 10.0
            script.steps = [503, ok()]
            await client.complete(MESSAGES)
    assert [
        r.getMessage().endswith("3 similar lines suppressed in the last 10 s") for r in caplog.records
    ] == [
        False,
        True,
    ]
