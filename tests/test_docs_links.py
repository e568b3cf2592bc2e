"""The documentation holds together: every relative link of the README and of ``docs/`` names a file
that exists (and, for a ``#fragment`` into a Markdown file, one of its headings); the README stays
short enough to read, and its test command is the one CI runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
MAX_README_LINES = 400


def anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lowercased, punctuation dropped, spaces as dashes."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    headings = [
        line.lstrip("#") for line in page.read_text(encoding="utf-8").splitlines() if line.startswith("#")
    ]
    return {anchor(h) for h in headings}


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_every_relative_link_names_a_file_and_heading_that_exist(page):
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)  # code is no link
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not checked offline
        path, _, fragment = target.partition("#")
        where = page if not path else (page.parent / path).resolve()
        if not where.exists() or (fragment and where.suffix == ".md" and fragment not in anchors(where)):
            broken.append(target)
    assert not broken, f"{page.relative_to(ROOT)}: broken links {broken}"


def test_the_readme_is_short_and_its_test_command_is_cis():
    readme = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(readme) < MAX_README_LINES
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    commands = [line for line in readme if line.startswith("python3 -m venv")]
    assert len(commands) == 2  # the set-up command (the main job), then the test command
    assert commands[0].endswith("&& vaswani train translation")
    assert commands[1] in ci, f".ci/run no longer runs the README's test command {commands[1]!r}"
