"""The repository explains itself: no file names a path of one development machine, and every
citation points at something a reader of the repository can open.

Rules, over every file git tracks (and the untracked ones it does not ignore, so a new file is
checked before its first commit):

* no absolute path into a machine's home, root-user or workspace folders (the top-level ``home``,
  ``root``, ``Users`` and ``work`` trees); ``../shared/datasets`` (the CI layout) and ``/tmp`` are
  not machine paths;
* no citation of a document the repository does not hold: the names of the private research notes
  the code was first written from, and no section sign outside ``docs/`` (a fact cites
  ``docs/sources.md#<section>``, a paper, or a public repository at a commit);
* every ``docs/<page>.md`` named anywhere is a page of the repository (the changelog may name a
  removed one), and every
  ``docs/<page>.md#<anchor>`` (and every ``(#anchor)`` link inside a page) is one of its headings.

The checks are plain functions, tested first on planted violations so that none of them passes
by finding nothing.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]

# The patterns are assembled from pieces so that this file does not match itself.
_MACHINE_ROOTS = "|".join(["work", "root", "home", "Users"])
MACHINE_PATH = re.compile(r"(?<![\w.~$-])/(?:" + _MACHINE_ROOTS + r")/[\w.$~-]")
WINDOWS_USER_PATH = re.compile(r"\b[A-Z]:\\" + "Users" + r"\\")
#: Names of documents that lived beside the checkout, never in it.
UNHELD_DOCUMENTS = re.compile("|".join([
    "peers" + "_and_style", "peer" + "_policies", "trpc_context" + "_and_benchmarks", "proxy" + "_anchors",
    r"\bDESIGN" + r"\.md", "research" + " anchor", r"\.\./shared/" + "reference", r"\.\./shared/" + "seed",
]))
SECTION_SIGN = "\u00a7"
DOCS_LINK = re.compile(r"(?<![\w/.-])(docs/[\w./-]+?\.md)(?:#([\w-]+))?")
LOCAL_ANCHOR_LINK = re.compile(r"\]\(#([\w-]+)\)")
#: The one file that may name a docs page the repository no longer holds (it says when it went).
HISTORY = "CHANGELOG.md"
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)


def repository_files() -> list[str]:
    """Paths (relative to the root) of the tracked files and the untracked, not ignored ones."""
    done = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        pytest.skip(f"not a git checkout: {done.stderr.strip()}")
    return sorted(p for p in done.stdout.split("\0") if p and (REPO_ROOT / p).is_file())


def text_of(path: str) -> str | None:
    """The file's text, or None for a binary file."""
    raw = (REPO_ROOT / path).read_bytes()
    if b"\0" in raw:
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def heading_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives the headings of a Markdown page (lowercase, punctuation dropped,
    spaces to hyphens)."""
    anchors = set()
    for title in HEADING.findall(markdown):
        title = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) or "", title)
        anchors.add(re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-"))
    return anchors


def _lines(text: str) -> Iterator[tuple[int, str]]:
    yield from enumerate(text.splitlines(), start=1)


def machine_path_violations(path: str, text: str) -> list[str]:
    """``path:line: …`` for every absolute path of a development machine in ``text``."""
    return [f"{path}:{n}: machine path {m.group(0)!r}..." for n, line in _lines(text)
            for m in [*MACHINE_PATH.finditer(line), *WINDOWS_USER_PATH.finditer(line)]]


def citation_violations(path: str, text: str, pages: dict[str, str]) -> list[str]:
    """``path:line: …`` for every citation in ``text`` that a reader of the repository cannot follow.

    ``pages`` maps each ``docs/*.md`` path the repository holds to its text.
    """
    found = []
    in_docs = path.startswith("docs/")
    for n, line in _lines(text):
        for m in UNHELD_DOCUMENTS.finditer(line):
            found.append(f"{path}:{n}: cites {m.group(0)!r}, a document this repository does not hold")
        if SECTION_SIGN in line and not in_docs:
            found.append(f"{path}:{n}: a section sign cites a section of an unnamed document; cite "
                         "docs/sources.md#<section>, the paper, or the repository at its commit")
        for m in DOCS_LINK.finditer(line):
            page, anchor = m.group(1), m.group(2)
            if page not in pages:
                if path == HISTORY:
                    continue  # the changelog names pages that were removed
                found.append(f"{path}:{n}: names {page}, which the repository does not hold")
            elif anchor and anchor not in heading_anchors(pages[page]):
                found.append(f"{path}:{n}: {page} has no section #{anchor}")
        if in_docs and path in pages:
            for anchor in LOCAL_ANCHOR_LINK.findall(line):
                if anchor not in heading_anchors(pages[path]):
                    found.append(f"{path}:{n}: links to #{anchor}, not a heading of this page")
    return found


# ------------------------------------------------------------------ the checks catch violations

PAGES = {"docs/sources.md": "# Sources\n\n## The summary benchmark\n\n### Summary benchmark metrics\n"}


@pytest.mark.parametrize("line", [
    "VENV = /" + "work/main/.venv",
    "see /" + "root/.cache/agentlab",
    "export AGENTLAB_DATA_DIR=/" + "home/alice/datasets",
    "open /" + "Users/bob/agentlab/results",
    "C:\\" + "Users\\carol\\agentlab",
])
def test_a_planted_machine_path_is_found(line: str) -> None:
    assert machine_path_violations("README.md", f"fine\n{line}\n") != []


@pytest.mark.parametrize("line", [
    "AGENTLAB_DATA_DIR=../shared/datasets",
    "--db /tmp/demo/demo.duckdb",
    "https://github.com/x/y/tree/main/home/page",
    "the token file ~/.ray/auth_token",
    "$HOME/.cache and ${WORK}/x",
])
def test_the_ci_layout_and_ordinary_paths_are_not_machine_paths(line: str) -> None:
    assert machine_path_violations("Makefile", line) == []


@pytest.mark.parametrize("line", [
    "Setup (reference " + SECTION_SIGN + "5.1): flatten every query",
    "Known pitfall (peers " + SECTION_SIGN + "1.6)",
    "two F1s (peers" + "_and_style, section 1)",
    "the thresholds (research" + " anchor, part 4)",
    "follow ../shared/" + "reference/notes.md",
    "names and defaults: DESIGN" + ".md",
    "see docs/" + "HELPERS.md",
    "see docs/sources.md#" + "no-such-section",
])
def test_a_planted_citation_that_cannot_be_followed_is_found(line: str) -> None:
    assert citation_violations("agentlab/bench/scoring/metrics.py", f'"""x\n{line}\n"""\n', PAGES) != []


def test_a_broken_link_inside_a_docs_page_is_found() -> None:
    page = PAGES["docs/sources.md"] + "\nSee [the metrics](#summary-benchmark-metrics), [gone](#gone).\n"
    found = citation_violations("docs/sources.md", page, {"docs/sources.md": page})
    assert len(found) == 1 and "#gone" in found[0]


def test_only_the_changelog_may_name_a_removed_page() -> None:
    line = "CONTRIBUTING.md replaces docs/" + "HELPERS.md (removed)"
    assert citation_violations("CHANGELOG.md", line, PAGES) == []
    assert citation_violations("README.md", line, PAGES) != []


def test_a_citation_of_a_held_page_and_section_is_fine() -> None:
    text = "F1 as the summary benchmark defines it (docs/sources.md#summary-benchmark-metrics); docs/sources.md"
    assert citation_violations("agentlab/bench/scoring/metrics.py", text, PAGES) == []


def test_heading_anchors_follow_github() -> None:
    page = "# Sources\n## MT-Bench-101 results\n### The `reference` implementation: trpc-agent-go\n"
    assert heading_anchors(page) == {"sources", "mt-bench-101-results",
                                     "the-reference-implementation-trpc-agent-go"}


# ------------------------------------------------------------------------ the repository itself

def test_no_file_names_a_path_of_a_development_machine() -> None:
    found = [v for path in repository_files() if (text := text_of(path)) is not None
             for v in machine_path_violations(path, text)]
    assert found == [], "\n".join(found)


def test_every_citation_points_at_something_the_repository_holds() -> None:
    files = repository_files()
    pages = {path: text for path in files if path.startswith("docs/") and path.endswith(".md")
             and (text := text_of(path)) is not None}
    assert "docs/sources.md" in pages
    found = [v for path in files if (text := text_of(path)) is not None
             for v in citation_violations(path, text, pages)]
    assert found == [], "\n".join(found)
