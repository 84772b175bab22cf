"""The documentation site keeps everything the README said, and its nav shows every page.

`make docs` (mkdocs build --strict) catches broken links and unresolved API references; these checks
need no MkDocs and run with the unit tests:

* every ``##`` / ``###`` heading of the README, those it had when the site was made (``MOVED``) and
  any it has now, is a heading of a page under ``docs/``, so slimming the README loses no section;
* the README stays a landing page: at most ``README_MAX_WORDS`` words (``wc -w``);
* ``mkdocs.yml``'s nav lists every page under ``docs/`` (Markdown and notebooks), and every page it
  lists exists;
* the design agentlab re-creates is named, never called "the seed": Sources has a tRPC-Agent-Go
  section linking its repository, and no page nor package module says "the seed".
"""

from __future__ import annotations

import os
import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
DOCS = REPO_ROOT / "docs"
#: Folders under docs/ that hold no pages (the build's hook).
NOT_PAGES = ("_hooks",)
#: The README's section headings before it became a landing page (its content moved to the site); each
#: keeps a home under docs/.
MOVED = (
    "Quickstart — the whole set-up on a fresh machine",
    "The main job",
    "Token accounting",
    "Denominators",
    "Comparing policies: variants, sweeps, paired intervals",
    "Evidence retention, without a model",
    "Agent trajectories",
    "Context window: stated, never guessed",
    "More than one machine",
    "The runtime in ten lines",
    "One seam for every context policy",
    "Skills, loaded when needed and learned after the run",
    "Comparing with other systems' policies",
    "League",
    "Adding a policy",
    "Your own agent, through the proxy",
    "Performance",
    "Layout",
    "Files and the code workspace",
    "Chains, fan-outs, cycles and graphs",
)
#: The README is a landing page; the manual is the site.
README_MAX_WORDS = 1600
NAV_ENTRY = re.compile(r"^\s*-\s+(?:[^:\n]+:\s+)?(\S+\.(?:md|ipynb))\s*$")


def headings(markdown: str, levels: tuple[int, ...] = (1, 2, 3, 4, 5, 6)) -> list[str]:
    """The text of the Markdown headings of the given levels, skipping fenced code blocks."""
    found, fenced = [], False
    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        m = re.match(r"^(#{1,6})\s+(.+?)\s*#*\s*$", line)
        if m and not fenced and len(m.group(1)) in levels:
            found.append(" ".join(m.group(2).split()))
    return found


def docs_pages(docs: Path = DOCS) -> set[str]:
    """Every page under ``docs`` (relative, ``/``-separated), symlinked folders followed."""
    pages = set()
    for folder, _, names in os.walk(docs, followlinks=True):  # docs/notebooks links ../notebooks
        for name in names:
            rel = (Path(folder) / name).relative_to(docs).as_posix()
            if name.endswith((".md", ".ipynb")) and not rel.startswith(NOT_PAGES) \
                    and ".ipynb_checkpoints" not in rel:
                pages.add(rel)
    return pages


def nav_pages(mkdocs_yml: str) -> list[str]:
    """The page paths listed under ``nav:`` in the text of an mkdocs.yml (read without YAML)."""
    lines = mkdocs_yml.splitlines()
    start = next((i for i, line in enumerate(lines) if line.rstrip() == "nav:"), None)
    if start is None:
        return []
    pages = []
    for line in lines[start + 1:]:
        if line.strip() and not line.startswith((" ", "-")):
            break  # the next top-level key
        if m := NAV_ENTRY.match(line):
            pages.append(m.group(1))
    return pages


def homeless(readme_headings: list[str], docs_headings: set[str]) -> list[str]:
    """The README headings that are a heading of no docs page."""
    return [h for h in readme_headings if h not in docs_headings]


def all_docs_headings() -> set[str]:
    return {h for page in docs_pages() if page.endswith(".md")
            for h in headings((DOCS / page).read_text(encoding="utf-8"))}


# ------------------------------------------------------------------------ the checks catch misses

def test_headings_skip_code_blocks_and_keep_levels() -> None:
    text = "# Title\n\n## One\n\n```bash\n# a comment, not a heading\n```\n\n### Two  \n#### Deep\n"
    assert headings(text, (2, 3)) == ["One", "Two"]
    assert homeless(["One", "Gone"], set(headings(text))) == ["Gone"]


def test_nav_pages_are_read_from_nested_entries_only_under_nav(tmp_path: Path) -> None:
    yml = ("site_name: x\nexclude_docs: |\n  - skip.md\nnav:\n  - Home: index.md\n  - Part:\n"
           "      - part/index.md\n      - A page: part/a.md\n      - NB: notebooks/01_x.ipynb\n"
           "plugins:\n  - search\n")
    assert nav_pages(yml) == ["index.md", "part/index.md", "part/a.md", "notebooks/01_x.ipynb"]
    (tmp_path / "_hooks").mkdir()
    (tmp_path / "_hooks" / "x.md").write_text("# hook notes\n")
    (tmp_path / "index.md").write_text("# Home\n")
    (tmp_path / "extra.md").write_text("# Extra\n")
    (tmp_path / "nb").mkdir()
    (tmp_path / "nb" / "01_x.ipynb").write_text("{}")
    (tmp_path / "notebooks").symlink_to(tmp_path / "nb")
    missing = docs_pages(tmp_path) - set(nav_pages(yml))
    assert missing == {"extra.md", "nb/01_x.ipynb"}  # notebooks/01_x.ipynb is listed, through the link


# ----------------------------------------------------------------------------- the site itself

def test_every_readme_section_has_a_home_on_the_site() -> None:
    readme = headings((REPO_ROOT / "README.md").read_text(encoding="utf-8"), (2, 3))
    wanted = list(dict.fromkeys([*MOVED, *readme]))
    missing = homeless(wanted, all_docs_headings())
    assert missing == [], ("README sections with no page under docs/ (move or copy each to a page "
                           f"and list it in mkdocs.yml's nav): {missing}")


def test_the_readme_stays_a_landing_page() -> None:
    words = len((REPO_ROOT / "README.md").read_text(encoding="utf-8").split())
    assert words <= README_MAX_WORDS, (f"README.md has {words} words (at most {README_MAX_WORDS}): put the "
                                       "depth on a page under docs/ and link it")


def test_the_nav_lists_every_page_and_only_pages_that_exist() -> None:
    nav = nav_pages((REPO_ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    pages = docs_pages()
    assert "index.md" in nav and len(nav) >= 10
    assert sorted(pages - set(nav)) == [], "pages under docs/ missing from mkdocs.yml's nav"
    assert sorted(set(nav) - pages) == [], "mkdocs.yml's nav lists pages docs/ does not hold"


def test_the_design_agentlab_recreates_is_named_not_called_the_seed() -> None:
    sources = (DOCS / "sources.md").read_text(encoding="utf-8")
    section = sources.split("\n## tRPC-Agent-Go\n", 1)[-1].split("\n## ", 1)[0]
    assert section != sources and "https://github.com/trpc-group/trpc-agent-go" in section, \
        "docs/sources.md needs a '## tRPC-Agent-Go' section linking the repository"
    prose = [*DOCS.rglob("*.md"), *(REPO_ROOT / "agentlab").rglob("*.py")]
    saying = [str(path.relative_to(REPO_ROOT)) for path in prose
              if re.search(r"\bthe seed\b", path.read_text(encoding="utf-8"), re.IGNORECASE)]
    assert len(prose) > 100 and saying == [], f"say tRPC-Agent-Go (docs/sources.md#trpc-agent-go) instead: {saying}"
