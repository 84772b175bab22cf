"""The published numbers the notebooks compare with, read from ``data/published_results.toml``.

Each table keeps its source (repository, path and commit of the report, the part of the report,
the section of ``docs/sources.md`` describing the experiment) in ``df.attrs`` so a notebook can
print where a number comes from next to it.
"""

from __future__ import annotations

import html
import sys
from typing import Any

import pandas as pd

from agentlab.notebooks.kernel import REPO_ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

PUBLISHED_FILE = REPO_ROOT / "data" / "published_results.toml"


def _published_data() -> dict[str, Any]:
    with PUBLISHED_FILE.open("rb") as fh:
        return tomllib.load(fh)


def published_tables(benchmark: str | None = None) -> list[str]:
    """Ids of the published tables (of one benchmark when given)."""
    tables = _published_data()["tables"]
    return [name for name, t in tables.items() if benchmark is None or t.get("benchmark") == benchmark]


def published(table_id: str) -> pd.DataFrame:
    """One published table as a DataFrame; ``df.attrs`` holds its source and metadata."""
    data = _published_data()
    tables = data["tables"]
    if table_id not in tables:
        raise KeyError(f"{PUBLISHED_FILE.name} has no table {table_id!r}; tables: {', '.join(sorted(tables))}")
    table = dict(tables[table_id])
    columns, rows = table.pop("columns"), table.pop("rows")
    for i, row in enumerate(rows):
        if len(row) != len(columns):
            raise ValueError(f"{PUBLISHED_FILE.name}: table {table_id} row {i} has {len(row)} values for "
                             f"{len(columns)} columns")
    df = pd.DataFrame(rows, columns=columns)
    source = data["sources"][table["source"]]
    df.attrs = {**table, "id": table_id, "repo": source["repo"], "path": source["path"], "commit": source["commit"]}
    return df


def published_source(df_or_id: pd.DataFrame | str) -> str:
    """``repo@commit:path, part (model; docs/sources.md#<section>)`` of a published table."""
    attrs = (published(df_or_id) if isinstance(df_or_id, str) else df_or_id).attrs
    return (f"{attrs['repo']}@{attrs['commit'][:7]}:{attrs['path']}, {attrs['report_part']} "
            f"({attrs['model']}; {attrs['docs']})")


def show_published(table_id: str) -> Any:
    """A published table with its source underneath, ready to display."""
    from IPython.display import HTML

    df = published(table_id)
    return HTML(f"<b>Published: {html.escape(table_id)}</b>{df.to_html(index=False, na_rep='–')}"
                f"<small>Source: {html.escape(published_source(df))}</small>")
