"""Published retrieval rows, the ``retrieval_protocol`` table of the results file, and the printed table.

A protocol result (``locomo --retrieval-only --unit ...``; see :mod:`agentlab.bench.retrieval.locomo`)
is stored as one row per (benchmark, protocol, unit, retriever, split, category, k): recall in
percent, the number of questions, and the run's embedder, the text its retriever indexed
(``indexed_text``), its configuration and latencies. Rerunning
the same (benchmark, protocol, unit, retriever) replaces its rows, so the table holds the latest
measurement of each.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from agentlab.bench.config import REPO_ROOT

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["format_comparison", "format_protocol", "protocol_rows", "published_recall", "published_search_latency",
           "read_protocol_table", "write_protocol_result"]

PUBLISHED_FILE = REPO_ROOT / "data" / "published_results.toml"
TABLE = "retrieval_protocol"
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS {TABLE} (
    benchmark VARCHAR NOT NULL,
    protocol VARCHAR NOT NULL,
    unit VARCHAR NOT NULL,
    retriever VARCHAR NOT NULL,
    split VARCHAR NOT NULL,          -- all | held_out | dev
    category VARCHAR NOT NULL,       -- overall, or the file's category number
    category_name VARCHAR,           -- the official scorer's name
    k INTEGER NOT NULL,
    recall DOUBLE,                   -- percent, over every question of the group
    questions INTEGER,
    embedder VARCHAR,
    indexed_text VARCHAR,            -- what the retriever indexed per unit (protocol text or expanded)
    config JSON,
    query_p50_ms DOUBLE,
    query_p95_ms DOUBLE,
    index_build_seconds DOUBLE,
    created TIMESTAMP
)
"""
#: A results file written before ``indexed_text`` existed gains the column (NULL: not recorded).
_MIGRATIONS = (f"ALTER TABLE {TABLE} ADD COLUMN IF NOT EXISTS indexed_text VARCHAR",)


def _paper_tables() -> dict[str, Any]:
    with PUBLISHED_FILE.open("rb") as fh:
        return dict(tomllib.load(fh).get("paper_tables", {}))


def published_recall(unit: str, table_id: str = "locomo_table3_dragon") -> dict[str, Any]:
    """The paper's recall row for ``unit`` ({"recall@k": percent}) with its source and caveats."""
    table = _paper_tables()[table_id]
    column = {name: i for i, name in enumerate(table["columns"])}
    overall = {f"recall@{row[column['k']]}": float(row[column["recall"]])
               for row in table["rows"] if row[column["unit"]] == unit}
    return {"retriever": table["retriever"], "source": f"{table['paper']}, {table['table']} ({table['url']})",
            "version": table["version"], "overall": overall, "per_category": None,
            "per_category_note": table["per_category"]}


def published_search_latency() -> dict[str, Any]:
    """Published memory-search latencies ({system: {p50_s, p95_s}}) with their source and note."""
    table = _paper_tables()["memory_search_latency"]
    systems = {row[0]: dict(zip(table["columns"][1:], row[1:], strict=True)) for row in table["rows"]}
    return {"systems": systems, "source": f"{table['paper']}; {table['table']}", "note": table["note"]}


def protocol_rows(result: dict[str, Any], benchmark: str) -> list[dict[str, Any]]:
    """The table rows of one protocol result (every split, category and k)."""
    latency = result.get("latency", {}).get("query", {})
    common = {"benchmark": benchmark, "protocol": result["protocol"], "unit": result["unit"],
              "retriever": result["retriever"], "embedder": result.get("embedder"),
              "indexed_text": result.get("indexed_text"),
              "config": json.dumps(result.get("config", {}), sort_keys=True),
              "query_p50_ms": latency.get("p50_ms"), "query_p95_ms": latency.get("p95_ms"),
              "index_build_seconds": result.get("latency", {}).get("index_build_seconds")}
    rows = []
    for split, body in result["splits"].items():
        groups = [("overall", None, body["overall"])]
        groups += [(cat, values["official"], values) for cat, values in body["per_category"].items()]
        for category, name, values in groups:
            for k in result["ks"]:
                rows.append({**common, "split": split, "category": category, "category_name": name, "k": int(k),
                             "recall": values.get(f"recall@{k}"), "questions": values.get("n")})
    return rows


def write_protocol_result(db: str | Path, result: dict[str, Any], benchmark: str) -> int:
    """Replace this (benchmark, protocol, unit, retriever)'s rows in ``db``; returns the rows written."""
    from agentlab.bench.store.results import ResultStore

    rows = protocol_rows(result, benchmark)
    columns = ["benchmark", "protocol", "unit", "retriever", "split", "category", "category_name", "k", "recall",
               "questions", "embedder", "indexed_text", "config", "query_p50_ms", "query_p95_ms", "index_build_seconds"]
    import datetime as _dt

    now = _dt.datetime.fromtimestamp(time.time())
    with ResultStore(db) as store:
        conn = store.conn
        conn.execute(_SCHEMA)
        for statement in _MIGRATIONS:
            conn.execute(statement)
        conn.execute(f"DELETE FROM {TABLE} WHERE benchmark = ? AND protocol = ? AND unit = ? AND retriever = ?",
                     [benchmark, result["protocol"], result["unit"], result["retriever"]])
        conn.executemany(f"INSERT INTO {TABLE} ({', '.join(columns)}, created) VALUES "
                         f"({', '.join('?' for _ in columns)}, ?)",
                         [[row[c] for c in columns] + [now] for row in rows])
    return len(rows)


def read_protocol_table(db: str | Path, benchmark: str | None = None) -> Any:
    """The stored ``retrieval_protocol`` rows as a DataFrame (empty when none were stored)."""
    import pandas as pd

    from agentlab.bench.store.results import ResultStore

    if not Path(db).exists():
        return pd.DataFrame()
    with ResultStore(db, read_only=True) as store:
        if not store.has_table(TABLE):
            return pd.DataFrame()
        if benchmark is None:
            return store.df(f"SELECT * FROM {TABLE} ORDER BY unit, retriever, split, category, k")
        return store.df(f"SELECT * FROM {TABLE} WHERE benchmark = ? ORDER BY unit, retriever, split, category, k",
                        [benchmark])


def _cell(value: Any) -> str:
    return "–" if value is None else f"{value:.1f}"


def format_protocol(result: dict[str, Any]) -> str:
    """The result as text: one block per split, our recall beside the paper's row, then latency."""
    ks = result["ks"]
    published = result.get("published") or {}
    lines = [f"{result['protocol']}: unit {result['unit']}, retriever {result['retriever']}"
             + (f" (embedder {result['embedder']})" if result.get("embedder") else "")
             + f"; {result['questions']} questions, {result['without_evidence']} without evidence (count 0)",
             f"indexed text: {result.get('indexed_text') or 'not recorded'}",
             "recall@k in percent over every question of the group; paper: "
             f"{published.get('retriever', '?')}, {published.get('source', '')}",
             f"  ({published.get('version', '')}; {published.get('per_category_note', '')})"]
    header = f"  {'group':<22}{'n':>6}" + "".join(f"{'@' + str(k):>8}" for k in ks)
    for split, body in result["splits"].items():
        if not body["questions"]:
            continue
        lines.append(f"[{split}] {', '.join(body['conversations'])}")
        lines.append(header)
        if split == "all" and published.get("overall"):
            lines.append(f"  {'paper ' + published.get('retriever', ''):<22}{'':>6}"
                         + "".join(f"{_cell(published['overall'].get(f'recall@{k}')):>8}" for k in ks))
        groups = [("overall", body["overall"])]
        groups += [(f"{cat} {values['official']}", values) for cat, values in body["per_category"].items()]
        for name, values in groups:
            lines.append(f"  {name:<22}{values['n']:>6}" + "".join(f"{_cell(values.get(f'recall@{k}')):>8}" for k in ks))
    latency = result.get("latency", {})
    query = latency.get("query", {})
    lines.append(f"query latency over {query.get('n')} questions: p50 {_ms(query.get('p50_ms'))}, "
                 f"p95 {_ms(query.get('p95_ms'))}; index build {latency.get('index_build_seconds', 0.0):.2f} s (apart)")
    for system, values in (latency.get("published_search") or {}).get("systems", {}).items():
        lines.append(f"  published memory search, {system}: p50 {values['p50_s']:.3f} s, p95 {values['p95_s']:.3f} s")
    note = (latency.get("published_search") or {}).get("note")
    if note:
        lines.append(f"  ({note})")
    cache = result.get("embedding_cache")
    if cache:
        lines.append(f"embedding cache: {cache['embedded_now']} texts embedded now, {cache['reused']} reused")
    return "\n".join(lines) + "\n"


def format_comparison(comparison: dict[str, Any]) -> str:
    """Several retrievers on one unit as one table beside the paper's row, each naming its indexed text.

    ``comparison`` is :func:`agentlab.bench.retrieval.retrievers.compare`'s result: overall recall@k of
    every question (all conversations), then the same on the held-out conversations.
    """
    ks = comparison["ks"]
    published = comparison.get("published") or {}
    results = comparison["results"]
    name_width = max(len(r["retriever"]) for r in results) + 2
    header = f"  {'retriever':<{name_width}}" + "".join(f"{'@' + str(k):>7}" for k in ks) + "  indexed text"
    lines = [f"{comparison['protocol']}: unit {comparison['unit']}; {comparison['questions']} questions, "
             f"{comparison['without_evidence']} without evidence (count 0); recall@k in percent over every question",
             f"paper: {published.get('retriever', '?')}, {published.get('source', '')}"]
    for split in ("all", "held_out"):
        bodies = [r["splits"][split] for r in results]
        if not bodies[0]["questions"]:
            continue
        lines.append(f"[{split}] {bodies[0]['questions']} questions: {', '.join(bodies[0]['conversations'])}")
        lines.append(header)
        if split == "all" and published.get("overall"):
            lines.append(f"  {'paper ' + published.get('retriever', ''):<{name_width}}"
                         + "".join(f"{_cell(published['overall'].get(f'recall@{k}')):>7}" for k in ks)
                         + f"  {comparison.get('published_indexed_text', '')}")
        for result, body in zip(results, bodies, strict=True):
            lines.append(f"  {result['retriever']:<{name_width}}"
                         + "".join(f"{_cell(body['overall'].get(f'recall@{k}')):>7}" for k in ks)
                         + f"  {result.get('indexed_text', '')}")
    embedders = sorted({r["embedder"] for r in results if r.get("embedder")})
    if embedders:
        lines.append(f"dense vectors: {', '.join(embedders)}")
    lines.append("document expansion (indexing more than the unit's own text) is a retriever choice; the "
                 "-protocol-text rows index exactly what DRAGON indexes. Per category and latency: --retriever R")
    return "\n".join(lines) + "\n"


def _ms(value: Any) -> str:
    return "–" if value is None else f"{value:.2f} ms"
