"""Which run each run of the results store is compared with (``report_runs``).

:func:`pair_runs` gives every run its role (baseline, lossy, recovered, other) and the baseline run
(and, for a recovered run, the lossy run) it is paired with; :mod:`agentlab.bench.store.derived`
writes the result as ``report_runs``, and every comparison table reads only that.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agentlab.bench.config import DEFAULT_VARIANT
from agentlab.bench.facts import ModeRoles

#: The variant of a run stored before variants existed (rerunning its command labels it).
LEGACY_VARIANT = "legacy"

#: Role of a run's mode in its benchmark's comparisons.
ROLE_BASELINE, ROLE_LOSSY, ROLE_RECOVERED, ROLE_OTHER = "baseline", "lossy", "recovered", "other"


def _role(mode: str, roles: ModeRoles | None) -> tuple[str, str | None]:
    """(role, lossy partner) of ``mode``: the task's named roles, else the registered arm's (:mod:`arms`)."""
    if roles is None:
        return ROLE_OTHER, None
    from agentlab.policies.arms import role_of

    return role_of(mode, roles.baseline, roles.lossy, roles.recovered)


def _best_partner(run: Mapping[str, Any], mode: str | None, runs: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The ``mode`` run ``run`` is compared with: same benchmark, model, context window (which prompts
    fit depends on it; ``--context-window`` is not a setting, so the variant does not show it) and
    context budget (the pressure the mechanisms were under), judge
    (or either unjudged: the judge's metrics then simply do not pair), data and task version, whose
    variant settings are a subset of ``run``'s; the most specific such run wins (its own
    variant name first, then the most shared settings, then ``default``), and among equals the one
    with the most ok cases, then a finished one, then the newest — so a newer partial run never
    displaces a fuller one.
    """
    if mode is None:
        return None
    mine = dict(run["variant_settings"] or {})
    candidates = [
        r for r in runs
        if r["mode"] == mode and r["benchmark"] == run["benchmark"] and r["model"] == run["model"]
        and r.get("context_window") == run.get("context_window")
        and r.get("context_budget") == run.get("context_budget")
        and (r["judge_model"] == run["judge_model"] or r["judge_model"] is None or run["judge_model"] is None)
        and r["dataset_sha256"] == run["dataset_sha256"]
        and r["task_version"] == run["task_version"]
        and all(k in mine and mine[k] == v for k, v in (r["variant_settings"] or {}).items())
    ]
    if not candidates:
        return None

    def rank(r: Mapping[str, Any]) -> tuple[Any, ...]:
        return (r["variant"] == run["variant"], len(r["variant_settings"] or {}), r["judge_model"] == run["judge_model"],
                r["variant"] == DEFAULT_VARIANT,
                r["n_ok"], r["status"] == "finished", r["started"] or 0, r["run_id"])

    return max(candidates, key=rank)


def pair_runs(runs: Sequence[Mapping[str, Any]], roles: Mapping[str, ModeRoles]) -> list[dict[str, Any]]:
    """Every run, with the baseline run (and for a recovered run, its lossy partner's run) it is compared with.

    A run's role and partner come from the benchmark's mode roles, then the registered arms
    (:func:`agentlab.policies.arms.role_of`): any number of lossy and recovered arms per benchmark.

    Every run is its own row — nothing is replaced because a newer run exists. Two runs of the same
    (mode, variant, model, judge) can only differ in data or task version (``--limit`` is not part of
    a run's id), and each is paired with the baseline on its own data and version. ``pairing`` says
    which rule chose the partner, or why there is none.
    """
    runs = [{**r, "variant": r.get("variant") or LEGACY_VARIANT} for r in runs]
    out = []
    for run in runs:
        mode_roles = roles.get(run["benchmark"])
        role, partner = _role(run["mode"], mode_roles)
        row: dict[str, Any] = {"run_id": run["run_id"], "variant": run["variant"], "role": role,
                               "baseline_run_id": None, "baseline_variant": None, "lossy_run_id": None,
                               "lossy_variant": None, "pairing": None}
        if mode_roles is None:
            row["pairing"] = "no mode roles for this benchmark"
        elif role != ROLE_BASELINE:
            base = _best_partner(run, mode_roles.baseline, runs)
            if base is None:
                row["pairing"] = (f"no {mode_roles.baseline} run of this model, context window and judge on the "
                                  f"same data and task version whose settings are a subset of this variant's")
            else:
                row.update(baseline_run_id=base["run_id"], baseline_variant=base["variant"],
                           pairing="same variant" if base["variant"] == run["variant"] else
                           f"baseline variant {base['variant']!r} (the most specific one this variant extends)")
            if role == ROLE_RECOVERED:
                lossy = _best_partner(run, partner, runs)
                if lossy is not None:
                    row.update(lossy_run_id=lossy["run_id"], lossy_variant=lossy["variant"])
        out.append(row)
    return out


