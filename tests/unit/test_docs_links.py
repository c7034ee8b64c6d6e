"""Every relative link in the user docs points at a file of this repository, and every ``#anchor`` at a
heading that exists.

The files checked: ``README.md``, ``CHANGELOG.md``, ``docs/*.md`` and the examples' READMEs. A link is
an inline Markdown link ``[text](target)`` outside code (fenced blocks and inline code spans are
skipped); ``http(s)://`` and ``mailto:`` targets are not followed. A target must stay inside the
repository (nothing may point outside it), must exist, and an anchor must match a heading of the
target file as GitHub names it (lower case, punctuation dropped, spaces as hyphens, ``-1``, ``-2``
for repeats).
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

FENCE = re.compile(r"^(```|~~~)")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
LINK = re.compile(r"(?<!!)\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
EXTERNAL = re.compile(r"^(?:[a-z][a-z0-9+.-]*:)", re.IGNORECASE)  # http:, https:, mailto:, ...


def doc_files(root: Path = ROOT) -> list[Path]:
    """The Markdown files a user reads."""
    files = [root / "README.md", root / "CHANGELOG.md", *sorted((root / "docs").glob("*.md"))]
    files += sorted((root / "examples").glob("*/README.md"))
    return [f for f in files if f.exists()]


def outside_fences(text: str) -> list[tuple[int, str]]:
    """(line number, line) of the lines outside fenced code blocks."""
    lines, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line.lstrip()):
            fenced = not fenced
        elif not fenced:
            lines.append((number, line))
    return lines


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading (before de-duplication)."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())  # \w: letters (any script), digits, _
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor the headings of ``path`` define."""
    seen: Counter[str] = Counter()
    found = set()
    for _, line in outside_fences(path.read_text(encoding="utf-8")):
        if m := HEADING.match(line):
            base = slug(m.group(2))
            found.add(base if seen[base] == 0 else f"{base}-{seen[base]}")
            seen[base] += 1
    return found


def links(path: Path) -> list[tuple[int, str]]:
    """(line number, target) of every inline link of ``path`` outside code."""
    found = []
    for number, line in outside_fences(path.read_text(encoding="utf-8")):
        prose = CODE_SPAN.sub(lambda m: " " * len(m.group(0)), line)
        found += [(number, m.group(1)) for m in LINK.finditer(prose)]
    return found


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    """What is wrong with the links of ``path``, one message per link ('file:line: target: why')."""
    problems = []
    rel = path.relative_to(root).as_posix()
    for number, target in links(path):
        if target and not EXTERNAL.match(target):
            why = _problem(path, target, root)
            if why:
                problems.append(f"{rel}:{number}: {target}: {why}")
    return problems


def _problem(path: Path, target: str, root: Path) -> str | None:
    where, _, anchor = target.partition("#")
    if where.startswith("/"):
        return "an absolute path (links are relative)"
    resolved = (path.parent / where).resolve() if where else path.resolve()
    if not resolved.is_relative_to(root.resolve()):
        return "points outside the repository"
    if not resolved.exists():
        return "no such file"
    if anchor and resolved.suffix != ".md":
        return "an anchor into a file that is not Markdown"
    if anchor and anchor not in anchors(resolved):
        return f"no heading #{anchor} in {resolved.name}"
    return None


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(path: Path) -> None:
    assert broken_links(path) == []


def test_the_user_docs_are_all_checked() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in doc_files()}
    assert {"README.md", "CHANGELOG.md", "docs/performance.md", "docs/architecture.md"} <= names
    assert len(links(ROOT / "README.md")) >= 10  # the pattern finds the README's links


# The checker, checked.


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("Coming from NeMo Guardrails", "coming-from-nemo-guardrails"),
        ("Serving: guardcache serve", "serving-guardcache-serve"),
        ("LangChain: `RunnableRails`", "langchain-runnablerails"),
        ("Serving (`guardcache serve`)", "serving-guardcache-serve"),
        (
            "Cache policies (benchmarks/bench_policy.py), 2026-11-26",
            "cache-policies-benchmarksbench_policypy-2026-11-26",
        ),
        ("Verdict or not, always said", "verdict-or-not-always-said"),
    ],
)
def test_slug_is_githubs(heading: str, anchor: str) -> None:
    assert slug(heading) == anchor


def test_broken_links_are_found(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n\n## Same\n\n## Same\n", encoding="utf-8")
    readme = tmp_path / "README.md"
    readme.write_text(
        "\n".join(
            [
                "# Top",
                "[ok](docs/a.md) [ok](docs/a.md#same) [ok](docs/a.md#same-1) [ok](#top)",
                "[web](https://example.com/x.md) ![img](missing.png) `[code](missing.md)`",
                "```",
                "[fenced](missing.md)",
                "```",
                "[gone](docs/b.md)",
                "[anchor](docs/a.md#nope)",
                "[out](../outside.md)",
                "[abs](/etc/passwd)",
                "[self](#nothing)",
            ]
        ),
        encoding="utf-8",
    )
    (tmp_path.parent / "outside.md").write_text("# Outside\n", encoding="utf-8")
    problems = broken_links(readme, root=tmp_path)
    assert [p.split(": ", 1)[0] for p in problems] == [f"README.md:{n}" for n in (7, 8, 9, 10, 11)], problems
    assert "no such file" in problems[0] and "no heading #nope" in problems[1]
    assert "outside the repository" in problems[2] and "absolute path" in problems[3]
    assert "no heading #nothing" in problems[4]
