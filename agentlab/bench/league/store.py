"""The ``leagues`` and ``league_rows`` tables of the results file (written by :mod:`agentlab.bench.league.play`).

``leagues``: one row per league id (the hash of the league's baseline run, arm runs and case ids)
with the header facts (model, window, budget, seeding, cases, how the baseline was obtained, the
primary metric). ``league_rows``: one row per league × arm × metric, the columns of
:data:`LEAGUE_COLUMNS`, read back by :func:`read_league` and ``agentlab.bench.analysis.league_df``.
Kept apart from the league's computation so the notebook API reads it without importing the CLI.
"""

from __future__ import annotations

from typing import Any

#: The columns of ``league_rows`` and of :func:`agentlab.bench.analysis.league_df`, in order.
LEAGUE_COLUMNS: tuple[tuple[str, str], ...] = (
    ("league_id", "VARCHAR"), ("benchmark", "VARCHAR"), ("arm", "VARCHAR"), ("role", "VARCHAR"),
    ("partner", "VARCHAR"), ("n_ok", "INTEGER"), ("n_failed", "INTEGER"), ("prompt_savings", "DOUBLE"),
    ("peak_prompt_tokens_mean", "DOUBLE"), ("peak_prompt_tokens_max", "BIGINT"), ("summary_calls", "DOUBLE"),
    ("summary_tokens", "DOUBLE"), ("metric", "VARCHAR"), ("delta", "DOUBLE"), ("ci_low", "DOUBLE"),
    ("ci_high", "DOUBLE"), ("p_value", "DOUBLE"), ("recovery", "DOUBLE"), ("pareto", "BOOLEAN"),
    ("evidence_kept", "DOUBLE"),
    # Beyond the stable columns: the runs, the intervals of savings and recovery, the pair counts.
    ("run_id", "VARCHAR"), ("baseline_run_id", "VARCHAR"), ("ordinal", "INTEGER"), ("n_cases", "INTEGER"),
    ("savings_ci_low", "DOUBLE"), ("savings_ci_high", "DOUBLE"), ("n_pairs", "INTEGER"),
    ("baseline_mean", "DOUBLE"), ("arm_mean", "DOUBLE"), ("recovery_ci_low", "DOUBLE"),
    ("recovery_ci_high", "DOUBLE"), ("evidence_cases", "INTEGER"), ("stats_note", "VARCHAR"),
    ("unchanged", "BOOLEAN"),
)
COLUMN_NAMES = tuple(name for name, _ in LEAGUE_COLUMNS)

_LEAGUES_SCHEMA = """
CREATE TABLE IF NOT EXISTS leagues (
    league_id VARCHAR PRIMARY KEY,
    benchmark VARCHAR NOT NULL,
    spec JSON,
    model VARCHAR,
    context_window INTEGER,
    context_budget INTEGER,
    seeding VARCHAR,
    case_limit INTEGER,
    n_cases INTEGER,
    selection VARCHAR,
    baseline VARCHAR,
    baseline_run_id VARCHAR,
    baseline_source VARCHAR,
    primary_metric VARCHAR,
    arms JSON,
    skipped JSON,
    smoke_test BOOLEAN,
    league_version VARCHAR,
    code_version VARCHAR,
    seconds DOUBLE,
    written TIMESTAMP
)"""


def create_tables(con: Any) -> None:
    """Create ``leagues`` and ``league_rows`` when missing."""
    columns = ", ".join(f"{name} {kind}" for name, kind in LEAGUE_COLUMNS)
    con.execute(_LEAGUES_SCHEMA)
    con.execute(f"CREATE TABLE IF NOT EXISTS league_rows ({columns})")
    for name, kind in LEAGUE_COLUMNS:  # a file written before a column existed gains it (NULL for old rows)
        con.execute(f"ALTER TABLE league_rows ADD COLUMN IF NOT EXISTS {name} {kind}")


def read_league(store: Any, benchmark: str | None = None, league_id: str | None = None) -> Any:
    """The stored ``league_rows`` (a :class:`~agentlab.bench.store.results.ResultStore`'s), in league and arm order;
    empty, with the columns, when no league was stored.
    """
    import pandas as pd

    if not store.has_table("league_rows"):
        return pd.DataFrame(columns=list(COLUMN_NAMES))
    where, params = [], []
    for column, value in (("benchmark", benchmark), ("league_id", league_id)):
        if value is not None:
            where.append(f"{column} = ?")
            params.append(value)
    sql = (f"SELECT {', '.join(COLUMN_NAMES)} FROM league_rows" + (f" WHERE {' AND '.join(where)}" if where else "")
           + " ORDER BY league_id, ordinal, metric")
    return store.df(sql, params)



__all__ = ["COLUMN_NAMES", "LEAGUE_COLUMNS", "create_tables", "read_league"]
