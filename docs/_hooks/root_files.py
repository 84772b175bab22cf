"""MkDocs hook: show files of the repository's root (CONTRIBUTING.md, CHANGELOG.md) as site pages.

A page holding the line ``<!-- include NAME -->`` gets the root file ``NAME`` in its place, and every
link in a page to a root file that the site shows (``README.md``, ``CHANGELOG.md``,
``CONTRIBUTING.md``, ``docs/<page>``) is pointed at the site's page, so the same Markdown reads
right on a code host and on the site (``mkdocs build --strict`` fails on a link it cannot follow).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
INCLUDE = re.compile(r"^<!-- include (\S+) -->$", re.MULTILINE)
#: Root files the site shows, and their page.
SITE_PAGES = {"README.md": "index.md", "CHANGELOG.md": "changelog.md", "CONTRIBUTING.md": "contributing.md"}
LINK = re.compile(r"\]\((?!https?:|#|mailto:)([^)\s#]+)(#[^)\s]*)?\)")


def _site_link(target: str, from_root: bool) -> str:
    """The site's name for a link ``target`` written in a root file (``from_root``) or a docs page."""
    if from_root:
        if target.startswith("docs/"):
            return target[len("docs/"):]
        return SITE_PAGES.get(target, target)
    if target.startswith("../") and target[3:] in SITE_PAGES:
        return SITE_PAGES[target[3:]]
    return target


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ANN001 (MkDocs' hook signature)
    """Inline the included root files, then point links at site pages."""
    def include(m: re.Match[str]) -> str:
        text = (ROOT / m.group(1)).read_text(encoding="utf-8")
        return LINK.sub(lambda k: f"]({_site_link(k.group(1), True)}{k.group(2) or ''})", text)

    markdown = INCLUDE.sub(include, markdown)
    return LINK.sub(lambda k: f"]({_site_link(k.group(1), False)}{k.group(2) or ''})", markdown)
