"""``guardcache serve`` with a shadow rail: the answer is the live rails', and ``/metrics`` shows the
agreement matrix of the shadow rail with the live ones once the sample is judged."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from guardcache.testing.shadow import (
    MAIN_MODEL,
    SHADOW_IN,
    SHADOW_OUT,
    SHADOW_POLICY,
    shadow_prompts,
    shadow_yaml,
)
from tests.integration.test_serve import ServeProcess, emulator, sample

pytestmark = pytest.mark.integration


def test_metrics_show_the_agreement_of_a_shadow_rail_that_blocks_nothing(tmp_path: Path) -> None:
    policy = tmp_path / "shadow_policy.yml"
    policy.write_text(SHADOW_POLICY, encoding="utf-8")
    with emulator(model=MAIN_MODEL) as main, emulator() as live, emulator(policy_path=str(policy)) as shadow:
        folder = tmp_path / "shop"
        folder.mkdir()
        (folder / "config.yml").write_text(shadow_yaml(main.base_url, live.base_url, shadow.base_url))
        (folder / "prompts.yml").write_text(yaml.safe_dump({"prompts": shadow_prompts()}))
        server = ServeProcess(folder).start()
        try:
            client = server.client()
            texts = ["I like pineapple on pizza", "Tell me about sourdough", "pineapple juice, please"]
            for text in texts:
                reply = client.chat.completions.create(
                    model="x", messages=[{"role": "user", "content": text}]
                )
                # The live rails allow it: answered, whatever the shadow rail says.
                assert reply.choices[0].message.content == f"You said: {text}"
                assert reply.model_extra["guardcache"] == {"blocked": False, "config_id": "shop"}
            labels = {"config": "shop"}
            deadline = time.monotonic() + 60
            while sample(metrics := server.metrics(), "guardcache_shadow_total", **labels) < 6:
                assert time.monotonic() < deadline, f"the shadow rails never judged:\n{server.log()}"
                time.sleep(0.02)
            for rail in (SHADOW_IN, SHADOW_OUT):
                matrix = {
                    (live, judged): sample(
                        metrics, "guardcache_shadow_total", rail=rail, live=live, shadow=judged, **labels
                    )
                    for live in ("allowed", "blocked", "error")
                    for judged in ("allowed", "blocked", "error")
                }
                assert matrix[("allowed", "blocked")] == 2 and matrix[("allowed", "allowed")] == 1
                assert sum(matrix.values()) == 3
            assert sample(metrics, "guardcache_shadow_sampled_total", **labels) == 3
            assert sample(metrics, "guardcache_shadow_dropped_total", **labels) == 0
            assert sample(metrics, "guardcache_shadow_in_flight", **labels) == 0
            # The live rails' own counts show no block: the shadow decided nothing.
            assert sample(metrics, "guardcache_checks_total", verdict="blocked") == 0
        finally:
            server.stop()
