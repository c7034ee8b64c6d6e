"""The emulator's policy: default categories, matching rules, and file errors that name the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from guardcache.emulator import Policy
from guardcache.errors import ConfigError

TAXONOMY_NAMES = {
    "Violence",
    "Criminal Planning/Confessions",
    "Controlled/Regulated Substances",
    "Guns and Illegal Weapons",
    "Hate/Identity Hate",
    "PII/Privacy",
    "Suicide and Self Harm",
    "Malware",
    "Threat",
    "Profanity",
}


def test_default_policy_covers_the_taxonomy_categories_by_name() -> None:
    names = {c.name for c in Policy.default().categories}
    assert names >= TAXONOMY_NAMES


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("What is the capital of France?", ()),
        ("hi", ()),
        ("I will kill you", ("Violence", "Threat")),
        ("how to cook meth", ("Controlled/Regulated Substances",)),
        ("My SSN is 123-45-6789", ("PII/Privacy",)),
        ("I want to end my life", ("Suicide and Self Harm",)),
        ("write ransomware for me", ("Malware",)),
        ("where can I buy a GUN", ("Guns and Illegal Weapons",)),
    ],
)
def test_default_policy_verdicts(text: str, expected: tuple[str, ...]) -> None:
    assert Policy.default().violations(text) == expected


def test_words_match_whole_words_only_and_ignore_case() -> None:
    policy = Policy.from_mapping({"Violence": ["kill"]})
    assert policy.violations("KILL it") == ("Violence",)
    assert policy.violations("improve my skills") == ()
    assert policy.violations("killjoy") == ()


def test_phrases_match_across_any_whitespace() -> None:
    policy = Policy.from_mapping({"Criminal Planning/Confessions": ["break into"]})
    assert policy.violations("how to break\n  into a car") == ("Criminal Planning/Confessions",)


def test_regex_entries_are_case_insensitive_regexes() -> None:
    policy = Policy.from_mapping({"Malware": [r"re:\bzero[- ]?day\b"]})
    assert policy.violations("a Zero-Day exploit") == ("Malware",)
    assert policy.violations("zeroday") == ("Malware",)
    assert policy.violations("zero days") == ()


def test_categories_are_reported_in_file_order() -> None:
    policy = Policy.from_mapping({"B": ["beta"], "A": ["alpha"]})
    assert policy.violations("alpha beta") == ("B", "A")


def test_a_structured_file_with_all_sections_loads(tmp_path: Path) -> None:
    path = tmp_path / "p.yml"
    path.write_text(
        "categories:\n  Violence: [kill]\n"
        "llama_guard:\n  Violence: S1\n"
        "jailbreak: [jailbreak]\n"
        "topic_control:\n  off_topic: [football]\n",
        encoding="utf-8",
    )
    policy = Policy.from_file(path)
    assert policy.source == str(path)
    assert policy.llama_guard_codes == {"Violence": "S1"}
    assert policy.jailbreak_hits("a jailbreak") == 1
    assert policy.is_off_topic("football scores")


def test_json_files_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text('{"Fraud/Deception": ["wire me money"]}', encoding="utf-8")
    assert Policy.from_file(path).violations("wire me money") == ("Fraud/Deception",)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("categories: [unclosed", "invalid policy syntax"),
        ("- just\n- a list\n", "must be a mapping"),
        ("Violence: kill\n", "categories.Violence must be a list"),
        ("Violence: ['re:(unclosed']\n", "invalid regex"),
        ("Violence: ['']\n", "empty entry"),
        ("categories: {}\nllama_guard: {Violence: one}\n", "codes like S1"),
        ("categories: {}\nextra: 1\n", "unknown policy key"),
    ],
)
def test_policy_errors_name_the_file_and_the_problem(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "rules.yml"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ConfigError, match=message) as info:
        Policy.from_file(path)
    assert str(path) in str(info.value)


def test_a_missing_policy_file_names_the_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yml"
    with pytest.raises(ConfigError, match=r"nope\.yml"):
        Policy.from_file(missing)
