"""LoCoMo's own report tables, read from the results store (:meth:`LoCoMoTask.report_tables
<agentlab.bench.tasks.locomo.LoCoMoTask.report_tables>`).

Per-category scores under the three category-name mappings, the 5-category (÷ all questions) and
4-category (no adversarial) weighted figures, and tokens, calls and latency per question. Every
table divides by all questions: a failed case and a judge verdict that did not parse both count 0
(the published LLM score divides by all questions), and the counts of each are shown.
"""

from __future__ import annotations

from typing import Any

import agentlab.bench.scoring.case_frames as case_frames
from agentlab.bench.datasets.locomo import ADVERSARIAL_CATEGORY, category_names
from agentlab.bench.scoring.metrics import percentile

__all__ = ["report_tables"]


def report_tables(store: Any, benchmark: str) -> dict[str, Any]:
    """Per-category scores (three name mappings), 5- and 4-category weighted figures, cost per question.

    Every figure divides by all questions of its group: failed cases (``n_failed``) and judge
    verdicts that did not parse (``n_judge_unparsed``) count 0. Memory-mode rows also show the
    extraction passes and extraction errors of the conversations their questions belong to.
    """
    import pandas as pd

    cases = _current_cases(store, benchmark)
    if cases.empty:
        return {}
    metrics = [m for m in ("locomo_f1", "set_f1", "bleu1", "llm_score") if m in cases.columns]

    def row(sub: Any, **keys: Any) -> dict[str, Any]:
        return {**keys, "n": len(sub), "n_failed": int((sub["status"] != "ok").sum()),
                "n_judge_unparsed": int(sub["judge_unparsed"].sum()), **{m: sub[m].mean() for m in metrics}}

    per_category, weighted, cost = [], [], []
    for (model, mode), group in cases.groupby(["model", "mode"]):
        for category, sub in group.groupby("category"):
            per_category.append(row(sub, model=model, mode=mode, category=int(category),
                                    **category_names(int(category))))
        for label, sub in (("5-category", group), ("4-category", group[group["category"] != ADVERSARIAL_CATEGORY])):
            weighted.append({**row(sub, model=model, mode=mode, weighting=label), **_extraction_counts(sub)})
        # Query latency = the answer calls of a question (judge and extraction time excluded);
        # failed questions are left out; cache hits replay in ~0 ms.
        ok = group[group["status"] == "ok"]
        latencies = [float(v) for v in ok["answer_latency_ms"].dropna()]
        cost.append({
            "model": model, "mode": mode, "n": len(group),
            "answer_prompt_tokens_per_q": group["answer_prompt"].mean(),
            "answer_total_tokens_per_q": group["answer_total"].mean(),
            "all_tokens_per_q": group["all_tokens"].mean(),
            "answer_calls_per_q": group["answer_calls"].mean(),
            "all_calls_per_q": group["all_calls"].mean(),
            "answer_latency_p50_ms": percentile(latencies, 50) if latencies else None,
            "answer_latency_p95_ms": percentile(latencies, 95) if latencies else None,
            "case_latency_p50_ms": percentile([float(v) for v in ok["latency_ms"].dropna()], 50)
            if len(ok) else None,
            "failed": int((group["status"] != "ok").sum()),
        })
    return {"per_category": pd.DataFrame(per_category), "weighted": pd.DataFrame(weighted),
            "cost_per_question": pd.DataFrame(cost)}


def _extraction_counts(cases: Any) -> dict[str, Any]:
    """Extraction passes and errors of the conversations behind these (memory-mode) questions.

    Extraction runs once per conversation and every question of it carries the same counts, so
    they are taken once per conversation. None for modes that extract nothing.
    """
    per_conversation: dict[str, tuple[int, int]] = {}
    for sample, passes, errors in zip(cases["sample_id"], cases["extraction_passes"], cases["extraction_errors"],
                                      strict=True):
        if passes is not None and passes == passes:  # NaN-safe: failed cases may not carry the counts
            per_conversation.setdefault(str(sample), (int(passes), int(errors or 0)))
    if not per_conversation:
        return {"extraction_passes": None, "extraction_errors": None}
    return {"extraction_passes": sum(p for p, _ in per_conversation.values()),
            "extraction_errors": sum(e for _, e in per_conversation.values())}


def _current_cases(store: Any, benchmark: str) -> Any:
    """The shown runs' cases (:func:`agentlab.bench.scoring.case_frames.case_tokens`) with category, tokens and scores.

    Failed cases score 0 (they stay in every denominator), as in the store's derived tables; a
    judge verdict that did not parse was stored as 0 and is flagged in ``judge_unparsed``.
    """
    from agentlab.bench.scoring.judge import PARSE_ERROR_PREFIX

    cases = case_frames.case_tokens(store, benchmark, ("answer",), columns=(
        "latency_ms", "all_tokens", "answer_latency_ms", "answer_calls", "all_calls"))
    if cases.empty:
        return cases
    meta = case_frames.case_metadata(cases)
    cases["category"] = [int(m.get("category", 0)) for m in meta]
    for key in ("sample_id", "extraction_passes", "extraction_errors"):
        cases[key] = [m.get(key) for m in meta]
    unparsed = store.df(
        "SELECT s.run_id, s.case_id FROM scores s WHERE s.metric = 'llm_score' AND starts_with(s.detail, ?) "
        "AND s.run_id IN (SELECT run_id FROM runs WHERE benchmark = ?)", [PARSE_ERROR_PREFIX, benchmark])
    flagged = set(zip(unparsed["run_id"], unparsed["case_id"], strict=True)) if not unparsed.empty else set()
    cases["judge_unparsed"] = [(r, c) in flagged and s == "ok"
                               for r, c, s in zip(cases["run_id"], cases["case_id"], cases["status"], strict=True)]
    case_frames.zero_failed(cases, ("locomo_f1", "set_f1", "bleu1"), if_scored=("llm_score",))
    if "llm_score" in cases.columns:
        # Verdicts stored before unparsable ones were scored 0 are NULL: the same rule applies.
        cases.loc[cases["judge_unparsed"], "llm_score"] = cases.loc[cases["judge_unparsed"], "llm_score"].fillna(0.0)
    return cases
