"""NeMo Guardrails settings guardcache accepts in a config but does not use.

guardcache rejects unknown keys so that a typo cannot silently change a guard's behaviour. A NeMo
Guardrails config, though, must load unchanged, and NeMo has many settings for features guardcache
does not have (dialog rails, Colang, knowledge base, tracing...). Those keys, and only those, are
removed before validation and reported together in one warning. The lists below are the documented
allowlist; a key missing here that NeMo accepts is a bug to fix here.
"""

from __future__ import annotations

from typing import Any

NEMO_TOP_LEVEL_KEYS: frozenset[str] = frozenset(
    {
        "actions_server_url",
        "bot_messages",
        "colang_version",
        "core",
        "custom_data",
        "docs",
        "embedding_search_provider",
        "enable_multi_step_generation",
        "enable_rails_exceptions",
        "event_source_uid",
        "flows",
        "import_paths",  # only an empty list gets here: RailsConfig refuses one that imports
        "knowledge_base",
        "lowest_temperature",
        "metrics",
        "passthrough",
        "prompting_mode",
        "raw_llm_call_action",
        "sensitive_data_detection",
        "streaming",
        "tracing",
        "user_messages",
    }
)
"""Top-level keys of NeMo's ``RailsConfig`` that guardcache ignores. (``instructions`` and
``sample_conversation`` are read: templates render them as NeMo's task manager does.)"""

NEMO_RAILS_KEYS: frozenset[str] = frozenset({"actions", "dialog", "retrieval"})
"""Keys under ``rails:`` that guardcache ignores (it runs ``rails.input``, ``rails.output`` and the
tool rails, ``rails.tool_input`` and ``rails.tool_output``)."""

USED_RAIL_SETTINGS: frozenset[str] = frozenset({"jailbreak_detection", "content_safety"})
"""Sections of ``rails.config`` guardcache reads; NeMo's others configure rails it does not run
(their flows are refused at load), so they are ignored with the rest."""

NEMO_RAIL_GROUP_KEYS: dict[str, frozenset[str]] = {
    "input": frozenset({"speculative_generation"}),
    "output": frozenset(),  # rails.output.streaming is used (guardcache.rails.streaming)
}
"""Keys under ``rails.input`` / ``rails.output`` that guardcache ignores."""


def strip_unused_nemo_keys(data: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """A copy of ``data`` without the allowlisted NeMo keys, and their dotted paths (sorted).

    Only mappings on the way are copied; ``data`` itself is not modified.
    """
    ignored: list[str] = []
    out = {k: v for k, v in data.items() if k not in NEMO_TOP_LEVEL_KEYS}
    ignored += [k for k in data if k in NEMO_TOP_LEVEL_KEYS]
    rails = out.get("rails")
    if isinstance(rails, dict):
        rails = {k: v for k, v in rails.items() if k not in NEMO_RAILS_KEYS}
        ignored += [f"rails.{k}" for k in out["rails"] if k in NEMO_RAILS_KEYS]
        for group, keys in NEMO_RAIL_GROUP_KEYS.items():
            settings = rails.get(group)
            if isinstance(settings, dict):
                rails[group] = {k: v for k, v in settings.items() if k not in keys}
                ignored += [f"rails.{group}.{k}" for k in settings if k in keys]
        settings = rails.get("config")
        if isinstance(settings, dict):
            rails["config"] = {k: v for k, v in settings.items() if k in USED_RAIL_SETTINGS}
            ignored += [f"rails.config.{k}" for k in settings if k not in USED_RAIL_SETTINGS]
        out["rails"] = rails
    return out, sorted(ignored)


__all__ = [
    "NEMO_RAILS_KEYS",
    "NEMO_RAIL_GROUP_KEYS",
    "NEMO_TOP_LEVEL_KEYS",
    "USED_RAIL_SETTINGS",
    "strip_unused_nemo_keys",
]
