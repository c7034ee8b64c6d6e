"""``cache.version`` joins the key namespace of that model's verdicts; unset, every key is the one
guardcache computed before versions existed (so a shared Redis tier stays warm across the upgrade)."""

from __future__ import annotations

import pytest

from guardcache.cache import Namespace
from guardcache.cache.keys import digest_fields
from guardcache.config import RailsConfig
from guardcache.rails.builder import build_runtime

MODEL = "nvidia/llama-3.1-nemoguard-8b-content-safety"
PARAMS = {"temperature": 0.01, "~flow": "content safety check input"}
# Computed by the code before versions existed (HEAD f41a531's guardcache/cache/keys.py): a namespace
# without a version must keep digesting to exactly these bytes.
BEFORE_NAMESPACE = "0bf8682f402d0ea5b0c67442efb9c44c"
BEFORE_KEY = "ddbb5c3867e45edd560d0d51119de88c53963127e8c0352ded16dd59506294e5"


def test_no_version_gives_the_keys_of_before_versions() -> None:
    ns = Namespace.of("content_safety", MODEL, "tpl-fingerprint", PARAMS)
    assert ns.version is None
    assert ns.digest.hex() == BEFORE_NAMESPACE
    assert digest_fields(ns.digest, ["hello"]).hex() == BEFORE_KEY


def test_a_version_makes_every_key_another() -> None:
    plain = Namespace.of("content_safety", MODEL, "tpl-fingerprint", PARAMS)
    v1 = Namespace.of("content_safety", MODEL, "tpl-fingerprint", PARAMS, version="2026-05")
    v2 = Namespace.of("content_safety", MODEL, "tpl-fingerprint", PARAMS, version="2026-06")
    assert len({plain.digest, v1.digest, v2.digest}) == 3
    assert v1 == Namespace.of("content_safety", MODEL, "tpl-fingerprint", PARAMS, version="2026-05")
    assert (
        v1.digest
        == Namespace.of("content_safety", MODEL, "tpl-fingerprint", PARAMS, version="2026-05").digest
    )
    texts = ["hello"]
    assert len({digest_fields(ns.digest, texts) for ns in (plain, v1, v2)}) == 3
    # A version is not a parameter: no parameter can spell the same namespace.
    assert (
        v1.digest
        != Namespace.of("content_safety", MODEL, "tpl-fingerprint", {**PARAMS, "version": "2026-05"}).digest
    )


CONFIG = """\
models:
  - type: main
    engine: nim
    model: meta/llama-3.1-8b-instruct
    parameters: {{base_url: http://127.0.0.1:9/v1}}
  - type: content_safety
    engine: nim
    model: nvidia/llama-3.1-nemoguard-8b-content-safety
    parameters: {{base_url: http://127.0.0.1:9/v1}}
    cache: {{{content_safety}}}
  - type: jailbreak_detection
    engine: nim
    model: jailbreak-detect
    parameters: {{base_url: http://127.0.0.1:9/v1}}
    cache: {{{jailbreak}}}
rails:
  config:
    jailbreak_detection: {{nim_base_url: "http://127.0.0.1:9/v1"}}
  input:
    flows:
      - content safety check input $model=content_safety
      - jailbreak detection model
"""


def namespaces(content_safety: str = "", jailbreak: str = "") -> list[Namespace]:
    config = RailsConfig.from_content(CONFIG.format(content_safety=content_safety, jailbreak=jailbreak))
    runtime = build_runtime(config)
    return [rail.check.namespace for rail in runtime.input_rails]  # type: ignore[attr-defined]


@pytest.mark.parametrize("check", [0, 1], ids=["content_safety", "jailbreak_detection"])
def test_each_models_version_reaches_its_own_checks_namespace_only(check: int) -> None:
    before = namespaces()
    assert [ns.version for ns in before] == [None, None]
    setting = {"content_safety": "version: guard-v2"} if check == 0 else {"jailbreak": "version: guard-v2"}
    after = namespaces(**setting)
    assert after[check].version == "guard-v2"
    assert after[check].digest != before[check].digest  # every old verdict of this model unreachable
    other = 1 - check
    assert after[other].digest == before[other].digest  # the other model's verdicts untouched
    # Other cache settings are not the verdict's: a ttl leaves the namespace as it was.
    assert namespaces(content_safety="ttl: 30", jailbreak="ttl: 30")[check].digest == before[check].digest
