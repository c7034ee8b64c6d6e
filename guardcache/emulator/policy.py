"""The emulated model's judgement: taxonomy categories matched by words and regexes.

A real guard model cannot run here, so verdicts come from a deterministic, inspectable policy:
tests can predict every answer, and a custom file can make any prompt unsafe on purpose.

File format (YAML or JSON)::

    categories:                      # taxonomy category NAME -> words or regexes
      Violence: [kill, murder, "re:\\bshoot(s|ing)?\\b"]
    llama_guard:                     # optional: category NAME -> Llama Guard code
      Violence: S1
    jailbreak: ["re:ignore (all )?previous instructions"]   # for /v1/classify
    topic_control:
      off_topic: [stock tips]        # always off-topic for topic-control prompts

A plain entry matches as a whole word or phrase, case-insensitively; an entry starting with ``re:``
is a case-insensitive regular expression. Scripts written without spaces between words (Chinese,
Japanese, Thai) and Arabic, whose words take attached prefixes, need ``re:`` entries: a plain entry's
word boundaries would never match inside a run of letters. A file whose top level has no
``categories`` key is read as the categories mapping itself. Categories are reported in file order.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from guardcache.config.files import ConfigReader
from guardcache.errors import ConfigError

DEFAULT_POLICY_RESOURCE = "default_policy.yml"


@dataclass(frozen=True, slots=True)
class Category:
    """One taxonomy category; its patterns are also joined into one alternation, so a check costs
    one regex scan per category instead of one per word."""

    name: str
    patterns: tuple[re.Pattern[str], ...]
    combined: re.Pattern[str] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.patterns:
            joined = "|".join(f"(?:{p.pattern})" for p in self.patterns)
            object.__setattr__(self, "combined", re.compile(joined, re.IGNORECASE))

    def matches(self, text: str) -> bool:
        return self.combined is not None and self.combined.search(text) is not None

    def first_match(self, text: str) -> str | None:
        """The text of the leftmost match (what a reasoning trace quotes), or None."""
        found = self.combined.search(text) if self.combined is not None else None
        return found.group(0) if found is not None else None


@dataclass(frozen=True, slots=True)
class Policy:
    """Compiled rules; ``source`` names the file (or ``<builtin>``) for error messages and stats."""

    categories: tuple[Category, ...]
    llama_guard_codes: Mapping[str, str] = field(default_factory=dict)
    jailbreak: tuple[re.Pattern[str], ...] = ()
    off_topic: tuple[re.Pattern[str], ...] = ()
    source: str = "<builtin>"

    def violations(self, text: str) -> tuple[str, ...]:
        """Names of the categories ``text`` violates, in policy order (empty = safe)."""
        if not text:
            return ()
        return tuple(c.name for c in self.categories if c.matches(text))

    def evidence(self, text: str) -> tuple[tuple[str, str], ...]:
        """``(category, matched text)`` for each violated category, in policy order."""
        if not text:
            return ()
        found = ((c.name, c.first_match(text)) for c in self.categories)
        return tuple((name, match) for name, match in found if match is not None)

    def jailbreak_hits(self, text: str) -> int:
        return sum(1 for p in self.jailbreak if p.search(text))

    def is_off_topic(self, text: str) -> bool:
        return any(p.search(text) for p in self.off_topic)

    @classmethod
    def default(cls) -> Policy:
        """The shipped ``default_policy.yml``."""
        text = resources.files(__package__).joinpath(DEFAULT_POLICY_RESOURCE).read_text("utf-8")
        return cls.from_text(text, source=f"<builtin {DEFAULT_POLICY_RESOURCE}>")

    @classmethod
    def from_file(cls, path: str | Path) -> Policy:
        """Load a YAML or JSON policy; every error names the file. Read as guardcache reads its own
        configs (``ConfigReader``: a bounded size, no FIFO, no alias bomb)."""
        path = Path(path)
        try:
            text = ConfigReader().read_text(path)
        except ConfigError as exc:
            problem = str(exc).removeprefix(f"{path}: ")
            raise ConfigError(f"{path}: cannot read emulator policy: {problem}") from exc
        return cls.from_text(text, source=str(path), is_json=path.suffix == ".json")

    @classmethod
    def from_text(cls, text: str, *, source: str, is_json: bool = False) -> Policy:
        try:
            data = json.loads(text) if is_json else ConfigReader().parse_yaml(text, source)
        except (ValueError, RecursionError, ConfigError) as exc:
            problem = str(exc).removeprefix(f"{source}: ")
            raise ConfigError(f"{source}: invalid policy syntax: {problem}") from exc
        return cls.from_mapping(data, source=source)

    @classmethod
    def from_mapping(cls, data: Any, *, source: str = "<mapping>") -> Policy:
        if not isinstance(data, Mapping):
            raise ConfigError(f"{source}: a policy must be a mapping of category names to lists")
        if "categories" not in data:
            data = {"categories": data}
        unknown = sorted(set(data) - {"categories", "llama_guard", "jailbreak", "topic_control"})
        if unknown:
            raise ConfigError(f"{source}: unknown policy key(s) {unknown}")
        raw = data.get("categories") or {}
        if not isinstance(raw, Mapping):
            raise ConfigError(f"{source}: 'categories' must map category names to lists")
        categories = tuple(
            Category(str(name), _compile(entries, source, f"categories.{name}"))
            for name, entries in raw.items()
        )
        codes = data.get("llama_guard") or {}
        if not isinstance(codes, Mapping) or not all(
            isinstance(v, str) and re.fullmatch(r"S\d+", v) for v in codes.values()
        ):
            raise ConfigError(f"{source}: 'llama_guard' must map category names to codes like S1")
        topic = data.get("topic_control") or {}
        if not isinstance(topic, Mapping) or set(topic) - {"off_topic"}:
            raise ConfigError(f"{source}: 'topic_control' may only hold 'off_topic'")
        return cls(
            categories=categories,
            llama_guard_codes={str(k): v for k, v in codes.items()},
            jailbreak=_compile(data.get("jailbreak") or [], source, "jailbreak"),
            off_topic=_compile(topic.get("off_topic") or [], source, "topic_control.off_topic"),
            source=source,
        )


def _compile(entries: Any, source: str, where: str) -> tuple[re.Pattern[str], ...]:
    if isinstance(entries, str) or not isinstance(entries, Sequence):
        raise ConfigError(f"{source}: {where} must be a list of words or 're:' regexes")
    patterns = []
    for entry in entries:
        if not isinstance(entry, str) or not entry.strip():
            raise ConfigError(f"{source}: {where} has a non-string or empty entry {entry!r}")
        if entry.startswith("re:"):
            expr = entry[3:]
        else:
            # Whole word or phrase; inner whitespace matches any run of whitespace.
            words = [re.escape(w) for w in entry.split()]
            expr = r"(?<!\w)" + r"\s+".join(words) + r"(?!\w)"
        try:
            patterns.append(re.compile(expr, re.IGNORECASE))
        except re.error as exc:
            raise ConfigError(f"{source}: {where}: invalid regex {expr!r}: {exc}") from exc
    return tuple(patterns)


def matched_categories(policy: Policy, texts: Sequence[str]) -> tuple[str, ...]:
    """Union of the violations of several texts, in policy order."""
    found = {name for text in texts for name in policy.violations(text)}
    return tuple(c.name for c in policy.categories if c.name in found)
