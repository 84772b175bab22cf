"""The SQL that decides which runs meet in a table, and how modes are compared.

Two questions, answered here once for the store, the report and every task:

* **Which run a table shows.** A benchmark's own published-style tables (``Task.report_tables``)
  show one run per (model, mode): :func:`current_runs_cte` / :func:`with_current_runs` (the CTE
  ``current_runs``), narrowed by a :class:`RunSelection` when the report is (``report --run`` /
  ``--variant``). Tasks read it through :meth:`ResultStore.current_runs_df
  <agentlab.bench.store.results.ResultStore.current_runs_df>`, never through a copy of their own.
* **How runs are compared.** The derived tables (``token_savings``, ``quality_loss``,
  ``recovery``) and the per-run means compare every run with its partners in ``report_runs``
  (:data:`PAIRED_RUNS_CTE`), on the cases both hold, with the denominators of
  :data:`CASE_METRIC_CTE` (a failed case scores 0 and stays in; an unscored one is left out and
  counted). :mod:`agentlab.bench.store.results` documents the tables' columns and runs these statements.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from agentlab.bench.scoring.recovery_rule import gap_is_a_loss_sql

__all__ = [
    "CASE_METRIC_CTE",
    "CURRENT_RUNS_CTE",
    "DERIVED_TABLES_SQL",
    "LAST_ANSWER_PROMPT_SQL",
    "MODE_MEANS_SQL",
    "PAIRED_RUNS_CTE",
    "QUALITY_LOSS_TABLE",
    "QUALITY_PAIRS_SQL",
    "RECOVERY_TABLE",
    "RECOVERY_TRIPLES_SQL",
    "RUN_MEANS_SQL",
    "TIE_EPSILON",
    "TOKEN_SAVINGS_TABLE",
    "RunSelection",
    "current_runs_cte",
    "with_current_runs",
]

#: Two per-case values closer than this count as a tie in the recovery table.
TIE_EPSILON = 1e-9


# ------------------------------------------------------------------------ the run a table shows

# The ranking of a benchmark's runs within one (model, mode); ``{where}`` narrows the candidates.
_CURRENT_RUNS_TEMPLATE = """
current_runs AS (
    SELECT * EXCLUDE (rn, n_ok) FROM (
        SELECT r.*, COALESCE(k.n_ok, 0) AS n_ok, row_number() OVER (
            PARTITION BY r.benchmark, r.model, r.mode
            ORDER BY (COALESCE(r.variant, '') = 'default') DESC, COALESCE(k.n_ok, 0) DESC,
                     (r.status = 'finished') DESC, r.started DESC, r.run_id) AS rn
        FROM runs r
        LEFT JOIN (SELECT run_id, count(*) AS n_ok FROM cases WHERE status = 'ok' GROUP BY run_id) k
          ON k.run_id = r.run_id
        WHERE r.benchmark = ?{where}
    ) WHERE rn = 1
)"""

#: The one run per (model, mode) a benchmark's own published-style tables show, as a CTE named
#: ``current_runs`` over ``runs`` with one ``?`` for the benchmark: the ``default`` variant first,
#: then the run with the most ok cases, then a finished one, then the newest — so a newer partial
#: or 0-case run never replaces a fuller one. Variants are compared in the generic tables
#: (token_savings, quality_loss, recovery, pareto). Prefer :func:`current_runs_cte`, which also
#: applies a report's run selection.
CURRENT_RUNS_CTE = _CURRENT_RUNS_TEMPLATE.format(where="")

# The runs a selection names, and the baseline and lossy runs they are compared with.
_SELECTED_RUNS = """
      AND r.run_id IN (
        SELECT x FROM (
            SELECT unnest([p.run_id, p.baseline_run_id, p.lossy_run_id]) AS x
            FROM report_runs p WHERE {conditions}
        ) WHERE x IS NOT NULL
      )"""


@dataclass(frozen=True)
class RunSelection:
    """The runs a report is narrowed to, as ``report --run ID`` / ``--variant NAME`` narrow it.

    A run is selected when it is one of ``run_ids`` (if any are given) and of one of ``variants``
    (if any are given; a run stored before variants existed is ``legacy``). The tables then show
    the selected runs and the runs they are compared with (their baseline and lossy partners in
    ``report_runs``), still one run per (model, mode).
    """

    run_ids: frozenset[str] = frozenset()
    variants: frozenset[str] = frozenset()

    @classmethod
    def of(cls, run_ids: Collection[str] | None = None, variants: Collection[str] | None = None) -> RunSelection:
        """A selection from the report's ``--run`` and ``--variant`` values (``None``: not narrowed)."""
        return cls(frozenset(run_ids or ()), frozenset(variants or ()))

    def __bool__(self) -> bool:
        return bool(self.run_ids or self.variants)


def current_runs_cte(benchmark: str, selection: RunSelection | None = None) -> tuple[str, list[Any]]:
    """The ``current_runs`` CTE (see :data:`CURRENT_RUNS_CTE`) for ``benchmark``, and its parameters.

    With a non-empty ``selection`` the candidates are the selected runs and their partners; that
    reads ``report_runs``, so the derived tables must have been rebuilt
    (:meth:`~agentlab.bench.store.results.ResultStore.rebuild_derived`, which ``report`` does first).
    """
    if not selection:
        return CURRENT_RUNS_CTE, [benchmark]
    conditions: list[str] = []
    params: list[Any] = [benchmark]
    if selection.run_ids:
        conditions.append(f"p.run_id IN ({', '.join('?' * len(selection.run_ids))})")
        params += sorted(selection.run_ids)
    if selection.variants:
        conditions.append(f"p.variant IN ({', '.join('?' * len(selection.variants))})")
        params += sorted(selection.variants)
    where = _SELECTED_RUNS.format(conditions=" AND ".join(conditions))
    return _CURRENT_RUNS_TEMPLATE.format(where=where), params


def with_current_runs(select_sql: str, benchmark: str,
                      selection: RunSelection | None = None) -> tuple[str, list[Any]]:
    """``select_sql`` (which reads ``current_runs``) preceded by the CTE, and the parameters to run it.

    ``select_sql`` itself must take no parameters: they would come after the CTE's.
    """
    cte, params = current_runs_cte(benchmark, selection)
    return f"WITH {cte}\n{select_sql}", params


# ----------------------------------------------------------------------- how runs are compared

#: Every run with its variant and comparison partners (``report_runs``, written by
#: :func:`~agentlab.bench.scoring.pairing.pair_runs`), as the CTE ``paired_runs``: the one place that decides
#: which runs the derived tables compare.
PAIRED_RUNS_CTE = """
paired_runs AS (
    SELECT r.* EXCLUDE (variant), p.variant, p.role, p.baseline_run_id, p.baseline_variant,
           p.lossy_run_id, p.lossy_variant
    FROM runs r JOIN report_runs p USING (run_id)
)"""

#: The denominators, as the CTE ``case_metric`` (after :data:`PAIRED_RUNS_CTE`): per (paired run,
#: case, metric), failed cases score 0; an ok case with a NULL score stays NULL.
#: A run's metrics are the ones it scored; a run in which every case failed (e.g. a long context no
#: case of which fits a small model's window) scored none, so it takes the metrics that every other
#: scored run of the same benchmark and model has (the answer metrics, not a mode's own extras),
#: and its failed cases count 0 on them like any failed case.
CASE_METRIC_CTE = """
run_metrics AS (
    SELECT DISTINCT run_id, metric FROM scores
),
scored_runs AS (
    SELECT r.benchmark, r.model, count(*) AS n_runs
    FROM paired_runs r WHERE r.run_id IN (SELECT run_id FROM run_metrics)
    GROUP BY ALL
),
shared_metrics AS (
    SELECT r.benchmark, r.model, m.metric
    FROM paired_runs r
    JOIN run_metrics m ON m.run_id = r.run_id
    JOIN scored_runs s ON s.benchmark = r.benchmark AND s.model = r.model
    GROUP BY r.benchmark, r.model, m.metric, s.n_runs
    HAVING count(*) = s.n_runs
),
metrics_of_run AS (
    SELECT run_id, metric FROM run_metrics
    UNION ALL
    SELECT r.run_id, sm.metric
    FROM paired_runs r JOIN shared_metrics sm ON sm.benchmark = r.benchmark AND sm.model = r.model
    WHERE r.run_id NOT IN (SELECT run_id FROM run_metrics)
      AND r.run_id NOT IN (SELECT run_id FROM cases WHERE status = 'ok')
),
case_metric AS (
    SELECT r.benchmark, r.model, r.mode, r.smoke_test, r.run_id, r.variant, r.baseline_run_id, r.baseline_variant,
           r.lossy_run_id, r.lossy_variant, c.case_id, m.metric, c.status,
           CASE WHEN c.status = 'ok' THEN s.value ELSE 0.0 END AS value
    FROM paired_runs r
    JOIN cases c ON c.run_id = r.run_id
    JOIN metrics_of_run m ON m.run_id = r.run_id
    LEFT JOIN scores s ON s.run_id = r.run_id AND s.case_id = c.case_id AND s.metric = m.metric
)"""

#: A case's prompt tokens by the published "last answer call" rule (:data:`~agentlab.bench.facts.LAST_ANSWER_CALL`),
#: over its calls ``k``: the prompt of its last answer call that returned, 0 when none did.
LAST_ANSWER_PROMPT_SQL = "COALESCE(arg_max(k.prompt_tokens, k.seq) FILTER (WHERE k.purpose = 'answer' AND k.error IS NULL), 0)"

#: Builds ``token_savings`` (see :mod:`agentlab.bench.store.results` for its columns): answer (and summary)
#: tokens of each run's ok cases against its baseline run's, per case and per run.
TOKEN_SAVINGS_TABLE = f"""
CREATE OR REPLACE TABLE token_savings AS
WITH {PAIRED_RUNS_CTE},
case_tokens AS (
    SELECT r.benchmark, r.model, r.mode, r.smoke_test, r.run_id, r.variant, r.baseline_run_id, r.baseline_variant,
        c.case_id, FALSE AS estimated,
        COALESCE(SUM(CASE WHEN k.purpose = 'answer' THEN k.prompt_tokens END), 0) AS answer_prompt,
        COALESCE(SUM(CASE WHEN k.purpose = 'answer' THEN k.prompt_tokens + k.completion_tokens END), 0) AS answer_total,
        {LAST_ANSWER_PROMPT_SQL} AS answer_prompt_last,
        COALESCE(SUM(CASE WHEN k.purpose = 'summary' THEN k.prompt_tokens END), 0) AS summary_prompt,
        COALESCE(SUM(CASE WHEN k.purpose = 'summary' THEN k.prompt_tokens + k.completion_tokens END), 0) AS summary_total
    FROM paired_runs r
    JOIN cases c ON c.run_id = r.run_id AND c.status = 'ok'
    LEFT JOIN calls k ON k.run_id = c.run_id AND k.case_id = c.case_id
    GROUP BY ALL
),
-- A baseline case whose prompt did not fit the model's window spent nothing, but the task stored
-- the prompt tokens it needed (counted with the toolkit's tokenizer): the savings of the other
-- modes are measured against that need, and the rows say how many such pairs they hold.
baseline_needed AS (
    SELECT r.benchmark, r.model, r.mode, r.smoke_test, r.run_id, r.variant, r.baseline_run_id, r.baseline_variant,
        c.case_id, TRUE AS estimated,
        TRY_CAST(json_extract_string(c.metadata, '$.prompt_tokens_needed') AS BIGINT) AS answer_prompt,
        NULL::BIGINT AS answer_total, 0 AS summary_prompt, NULL::BIGINT AS summary_total,
        TRY_CAST(json_extract_string(c.metadata, '$.prompt_tokens_needed') AS BIGINT) AS answer_prompt_last
    FROM paired_runs r
    JOIN cases c ON c.run_id = r.run_id AND c.status = 'failed' AND c.error_code = 'context_length'
    WHERE r.role = 'baseline' AND TRY_CAST(json_extract_string(c.metadata, '$.prompt_tokens_needed') AS BIGINT) > 0
),
pairs AS (
    SELECT x.benchmark, x.model, x.mode, x.variant, x.run_id, b.mode AS baseline_mode, x.baseline_variant,
        x.baseline_run_id, x.case_id,
        (b.smoke_test OR x.smoke_test) AS smoke_test, b.estimated AS baseline_estimated,
        b.answer_prompt AS baseline_prompt_tokens, x.answer_prompt AS mode_prompt_tokens,
        b.answer_total AS baseline_total_tokens, x.answer_total AS mode_total_tokens,
        b.summary_prompt AS baseline_summary_prompt_tokens, x.summary_prompt AS mode_summary_prompt_tokens,
        b.summary_total AS baseline_summary_total_tokens, x.summary_total AS mode_summary_total_tokens,
        b.answer_prompt_last AS baseline_prompt_tokens_last, x.answer_prompt_last AS mode_prompt_tokens_last,
        mr.published_token_rule
    FROM case_tokens x
    JOIN (SELECT * FROM case_tokens UNION ALL BY NAME SELECT * FROM baseline_needed) b
      ON b.run_id = x.baseline_run_id AND b.case_id = x.case_id
    LEFT JOIN mode_roles mr ON mr.benchmark = x.benchmark
),
per_case AS (
    SELECT *,
        (baseline_prompt_tokens - mode_prompt_tokens) / NULLIF(baseline_prompt_tokens, 0) AS prompt_savings,
        (baseline_total_tokens - mode_total_tokens) / NULLIF(baseline_total_tokens, 0) AS total_savings,
        ((baseline_prompt_tokens + baseline_summary_prompt_tokens) - (mode_prompt_tokens + mode_summary_prompt_tokens))
            / NULLIF(baseline_prompt_tokens + baseline_summary_prompt_tokens, 0) AS prompt_savings_with_summary,
        ((baseline_total_tokens + baseline_summary_total_tokens) - (mode_total_tokens + mode_summary_total_tokens))
            / NULLIF(baseline_total_tokens + baseline_summary_total_tokens, 0) AS total_savings_with_summary,
        (baseline_prompt_tokens_last - mode_prompt_tokens_last) / NULLIF(baseline_prompt_tokens_last, 0)
            AS prompt_savings_last
    FROM pairs
)
SELECT benchmark, model, mode, variant, run_id, baseline_mode, baseline_variant, baseline_run_id,
    'case' AS level, case_id, 1 AS n_cases, smoke_test,
    CASE WHEN baseline_estimated THEN 1 ELSE 0 END AS n_baseline_estimated,
    baseline_prompt_tokens::DOUBLE AS baseline_prompt_tokens, mode_prompt_tokens::DOUBLE AS mode_prompt_tokens,
    baseline_total_tokens::DOUBLE AS baseline_total_tokens, mode_total_tokens::DOUBLE AS mode_total_tokens,
    mode_summary_prompt_tokens::DOUBLE AS mode_summary_prompt_tokens,
    mode_summary_total_tokens::DOUBLE AS mode_summary_total_tokens,
    prompt_savings, prompt_savings AS prompt_savings_ratio,
    total_savings, total_savings AS total_savings_ratio,
    prompt_savings_with_summary, prompt_savings_with_summary AS prompt_savings_with_summary_ratio,
    total_savings_with_summary, total_savings_with_summary AS total_savings_with_summary_ratio,
    CASE WHEN total_savings < 0 THEN 1.0 WHEN total_savings IS NULL THEN NULL ELSE 0.0 END AS negative_rate,
    baseline_prompt_tokens_last::DOUBLE AS baseline_prompt_tokens_last,
    mode_prompt_tokens_last::DOUBLE AS mode_prompt_tokens_last,
    prompt_savings_last, prompt_savings_last AS prompt_savings_last_ratio, published_token_rule
FROM per_case
UNION ALL
SELECT benchmark, model, mode, variant, run_id, baseline_mode, baseline_variant, baseline_run_id,
    'aggregate' AS level, NULL AS case_id, count(*) AS n_cases,
    bool_or(smoke_test) AS smoke_test, count(*) FILTER (WHERE baseline_estimated) AS n_baseline_estimated,
    avg(baseline_prompt_tokens), avg(mode_prompt_tokens),
    -- Totals need both sides' completions: pairs with an estimated baseline are left out of them.
    avg(baseline_total_tokens) FILTER (WHERE NOT baseline_estimated),
    avg(mode_total_tokens) FILTER (WHERE NOT baseline_estimated),
    avg(mode_summary_prompt_tokens), avg(mode_summary_total_tokens),
    avg(prompt_savings),
    (sum(baseline_prompt_tokens) - sum(mode_prompt_tokens)) / NULLIF(sum(baseline_prompt_tokens), 0),
    avg(total_savings),
    (sum(baseline_total_tokens) FILTER (WHERE NOT baseline_estimated)
        - sum(mode_total_tokens) FILTER (WHERE NOT baseline_estimated))
        / NULLIF(sum(baseline_total_tokens) FILTER (WHERE NOT baseline_estimated), 0),
    avg(prompt_savings_with_summary),
    (sum(baseline_prompt_tokens + baseline_summary_prompt_tokens) - sum(mode_prompt_tokens + mode_summary_prompt_tokens))
        / NULLIF(sum(baseline_prompt_tokens + baseline_summary_prompt_tokens), 0),
    avg(total_savings_with_summary),
    (sum(baseline_total_tokens + baseline_summary_total_tokens) FILTER (WHERE NOT baseline_estimated)
        - sum(mode_total_tokens + mode_summary_total_tokens) FILTER (WHERE NOT baseline_estimated))
        / NULLIF(sum(baseline_total_tokens + baseline_summary_total_tokens) FILTER (WHERE NOT baseline_estimated), 0),
    avg(CASE WHEN total_savings < 0 THEN 1.0 ELSE 0.0 END) FILTER (WHERE total_savings IS NOT NULL),
    avg(baseline_prompt_tokens_last), avg(mode_prompt_tokens_last), avg(prompt_savings_last),
    (sum(baseline_prompt_tokens_last) - sum(mode_prompt_tokens_last)) / NULLIF(sum(baseline_prompt_tokens_last), 0),
    any_value(published_token_rule)
FROM per_case
GROUP BY benchmark, model, mode, variant, run_id, baseline_mode, baseline_variant, baseline_run_id
"""

# Each (mode, variant) run's cases against its baseline run's, per metric: the cases both attempted.
_QUALITY_JOIN = """
FROM case_metric x
JOIN case_metric b ON b.run_id = x.baseline_run_id AND b.case_id = x.case_id AND b.metric = x.metric"""

#: Builds ``quality_loss``: each run's mean per metric against its baseline run's, on shared cases.
QUALITY_LOSS_TABLE = f"""
CREATE OR REPLACE TABLE quality_loss AS
WITH {PAIRED_RUNS_CTE}, {CASE_METRIC_CTE}
SELECT x.benchmark, x.model, x.mode, x.variant, x.run_id, b.mode AS baseline_mode, x.baseline_variant,
    x.baseline_run_id, x.metric,
    count(*) AS n_cases,
    count(*) FILTER (WHERE b.value IS NOT NULL AND x.value IS NOT NULL) AS n_scored,
    count(*) FILTER (WHERE b.status = 'failed') AS n_failed_baseline,
    count(*) FILTER (WHERE x.status = 'failed') AS n_failed_mode,
    bool_or(b.smoke_test OR x.smoke_test) AS smoke_test,
    avg(b.value) FILTER (WHERE b.value IS NOT NULL AND x.value IS NOT NULL) AS baseline_mean,
    avg(x.value) FILTER (WHERE b.value IS NOT NULL AND x.value IS NOT NULL) AS mode_mean,
    avg(x.value - b.value) FILTER (WHERE b.value IS NOT NULL AND x.value IS NOT NULL) AS delta,
    (avg(b.value) FILTER (WHERE b.value IS NOT NULL AND x.value IS NOT NULL)
      - avg(x.value) FILTER (WHERE b.value IS NOT NULL AND x.value IS NOT NULL))
      / NULLIF(avg(b.value) FILTER (WHERE b.value IS NOT NULL AND x.value IS NOT NULL), 0) AS relative_loss
{_QUALITY_JOIN}
GROUP BY x.benchmark, x.model, x.mode, x.variant, x.run_id, b.mode, x.baseline_variant, x.baseline_run_id, x.metric
"""

#: The scored (baseline, mode) pairs behind each quality_loss row: what its interval resamples.
QUALITY_PAIRS_SQL = f"""
WITH {PAIRED_RUNS_CTE}, {CASE_METRIC_CTE}
SELECT x.run_id, x.metric, x.case_id, b.value AS baseline_value, x.value AS mode_value
{_QUALITY_JOIN}
WHERE b.value IS NOT NULL AND x.value IS NOT NULL
ORDER BY x.run_id, x.metric, x.case_id
"""

# Each recovered (mode, variant) run with its lossy and baseline partners, per case and metric.
_RECOVERY_SCORED_CTE = """
triples AS (
    SELECT r.benchmark, r.model, r.metric, b.mode AS baseline_mode, l.mode AS lossy_mode,
        r.mode AS recovered_mode, r.variant, r.run_id, r.lossy_variant, r.lossy_run_id, r.baseline_variant,
        r.baseline_run_id, r.case_id,
        (b.smoke_test OR l.smoke_test OR r.smoke_test) AS smoke_test, b.status AS baseline_status,
        b.value AS baseline_value, l.value AS lossy_value, r.value AS recovered_value
    FROM case_metric r
    JOIN case_metric l ON l.run_id = r.lossy_run_id AND l.case_id = r.case_id AND l.metric = r.metric
    JOIN case_metric b ON b.run_id = r.baseline_run_id AND b.case_id = r.case_id AND b.metric = r.metric
),
scored AS (
    SELECT * FROM triples
    WHERE baseline_value IS NOT NULL AND lossy_value IS NOT NULL AND recovered_value IS NOT NULL
)"""

#: The scored (baseline, lossy, recovered) triples behind each recovery row: what its interval resamples.
RECOVERY_TRIPLES_SQL = f"""
WITH {PAIRED_RUNS_CTE}, {CASE_METRIC_CTE}, {_RECOVERY_SCORED_CTE}
SELECT run_id, metric, case_id, baseline_status, baseline_value, lossy_value, recovered_value
FROM scored ORDER BY run_id, metric, case_id
"""

_OK_BASELINE = "avg(baseline_value) FILTER (WHERE baseline_status = 'ok')"
_OK_LOSSY = "avg(lossy_value) FILTER (WHERE baseline_status = 'ok')"
#: Builds ``recovery``: (recovered - lossy) / (baseline - lossy) per recovered run and metric, with
#: per-case wins, losses and ties of recovered against lossy.
RECOVERY_TABLE = f"""
CREATE OR REPLACE TABLE recovery AS
WITH {PAIRED_RUNS_CTE}, {CASE_METRIC_CTE}, {_RECOVERY_SCORED_CTE}
SELECT benchmark, model, metric, baseline_mode, lossy_mode, recovered_mode, variant, run_id, lossy_variant,
    lossy_run_id, baseline_variant, baseline_run_id,
    count(*) AS n_cases, bool_or(smoke_test) AS smoke_test,
    count(*) FILTER (WHERE baseline_status = 'failed') AS n_failed_baseline,
    avg(baseline_value) AS baseline_mean, avg(lossy_value) AS lossy_mean, avg(recovered_value) AS recovered_mean,
    -- Undefined (NULL) when no baseline case produced an answer, and when the lossy run lost nothing
    -- (above the baseline, or within 1 % of it: agentlab/bench/scoring/recovery_rule.py; stats_note says which).
    CASE WHEN count(*) FILTER (WHERE baseline_status = 'failed') < count(*)
              AND {gap_is_a_loss_sql("avg(baseline_value)", "avg(lossy_value)")} THEN
        (avg(recovered_value) - avg(lossy_value)) / NULLIF(avg(baseline_value) - avg(lossy_value), 0)
    END AS recovery,
    -- The same over the cases whose baseline answered: a failed baseline case counts 0 above,
    -- which shrinks the loss to recover and can push ``recovery`` past 100 %; this one cannot be
    -- moved by baseline failures.
    count(*) FILTER (WHERE baseline_status = 'ok') AS n_baseline_ok,
    CASE WHEN {gap_is_a_loss_sql(_OK_BASELINE, _OK_LOSSY)} THEN
    (avg(recovered_value) FILTER (WHERE baseline_status = 'ok') - avg(lossy_value) FILTER (WHERE baseline_status = 'ok'))
        / NULLIF({_OK_BASELINE} - {_OK_LOSSY}, 0) END AS recovery_baseline_ok,
    count(*) FILTER (WHERE recovered_value - lossy_value > {TIE_EPSILON}) AS wins,
    count(*) FILTER (WHERE lossy_value - recovered_value > {TIE_EPSILON}) AS losses,
    count(*) FILTER (WHERE abs(recovered_value - lossy_value) <= {TIE_EPSILON}) AS ties
FROM scored
GROUP BY benchmark, model, metric, baseline_mode, lossy_mode, recovered_mode, variant, run_id, lossy_variant,
    lossy_run_id, baseline_variant, baseline_run_id
"""

#: The derived tables' statements, in the order they are run (after ``report_runs`` is written).
DERIVED_TABLES_SQL = (TOKEN_SAVINGS_TABLE, QUALITY_LOSS_TABLE, RECOVERY_TABLE)

#: Mean of each metric per run (failed cases count 0; NULL scores left out and counted).
#: Needs ``report_runs`` (written by :meth:`ResultStore.rebuild_derived`).
MODE_MEANS_SQL = f"""
WITH {PAIRED_RUNS_CTE}, {CASE_METRIC_CTE}
SELECT benchmark, model, mode, variant, run_id, metric, avg(value) AS mean, count(*) AS n_cases,
    count(*) FILTER (WHERE status = 'failed') AS n_failed,
    count(*) FILTER (WHERE value IS NULL) AS n_unscored, bool_or(smoke_test) AS smoke_test
FROM case_metric
WHERE benchmark = ?
GROUP BY benchmark, model, mode, variant, run_id, metric
ORDER BY model, mode, variant, metric
"""

#: Mean of each metric over all cases of one run (params: run_id twice), by the same rule:
#: failed cases count 0, NULL scores of ok cases are left out and counted.
RUN_MEANS_SQL = """
SELECT m.metric, avg(CASE WHEN c.status = 'ok' THEN s.value ELSE 0.0 END) AS mean, count(*) AS n_cases,
    count(*) FILTER (WHERE c.status = 'failed') AS n_failed,
    count(*) FILTER (WHERE c.status = 'ok' AND s.value IS NULL) AS n_unscored
FROM cases c
CROSS JOIN (SELECT DISTINCT metric FROM scores WHERE run_id = ?) m
LEFT JOIN scores s ON s.run_id = c.run_id AND s.case_id = c.case_id AND s.metric = m.metric
WHERE c.run_id = ?
GROUP BY m.metric
ORDER BY m.metric
"""


