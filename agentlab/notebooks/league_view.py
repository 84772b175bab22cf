"""The policy league of ``notebooks/04_policy_league.ipynb``: the table, its Pareto plot, and what each
arm sent the model for one case.

* :func:`ensure_league` runs (or resumes) one league — the baseline once, then every arm, on the same
  cases, model and context budget — with :func:`agentlab.bench.league.play.run_league`, the function behind
  ``python -m agentlab.bench league``; the table is stored in the results file.
* :func:`stored_leagues` lists the leagues stored there (one per benchmark, budget and seeding for a
  model, the latest when several), :func:`league_table` reads one back through
  :func:`agentlab.bench.analysis.league_df` (its columns are defined in :mod:`agentlab.bench.league.play`).
* :func:`plot_league` draws quality delta against prompt savings with both paired 95 % intervals.
* :func:`case_requests` projects one case's seeded history through each arm's mechanisms
  (:func:`agentlab.core.project`, the functions a live agent builds its request with) and
  :func:`requests_html` shows the requests side by side.
"""

from __future__ import annotations

import html
import io
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from agentlab.notebooks.plots import coincident_groups, label_points, percent_decimals
from agentlab.notebooks.provenance import titled

if TYPE_CHECKING:
    from matplotlib.axes import Axes

#: The columns the league table shows (of ``analysis.league_df``'s), in this order.
TABLE_COLUMNS = ["arm", "role", "partner", "n_ok", "n_failed", "prompt_savings", "peak_prompt_tokens_mean",
                 "peak_prompt_tokens_max", "summary_calls", "summary_tokens", "delta", "ci_low", "ci_high", "p_value",
                 "recovery", "pareto", "evidence_kept", "unchanged"]
#: One colour per role in the league plot.
ROLE_COLOURS = {"baseline": "#4c72b0", "lossy": "#dd8452", "recovered": "#55a868"}


# ------------------------------------------------------------------------------------ running and reading


def ensure_league(benchmark: str, arms: Sequence[str], *, model: str, limit: int, db: str | os.PathLike[str],
                  context_budget: int, echo: bool = True) -> dict[str, Any]:
    """Run (or find stored) one league: ``python -m agentlab.bench league <benchmark> --arms a,b,…
    --limit N --context-budget B``, in-process; returns its ``--json`` payload.

    Resumable like every run: cases stored ``ok`` are reused, so a second call sends no model call.
    With ``echo``, one line on what ran and what was reused.
    """
    from agentlab.bench.league.play import run_league

    Path(db).parent.mkdir(parents=True, exist_ok=True)
    notes = io.StringIO()
    result = run_league(benchmark, arms=",".join(arms), model=model, limit=limit, context_budget=context_budget,
                        db=Path(db), progress=False, notes=notes)
    payload = result.to_dict()
    if echo:
        reused = sum(1 for a in payload["arms"] if a.get("cases_run_now") == 0)
        print(f"league {payload['league_id']}: {benchmark} at a {context_budget:,}-token budget, "
              f"{len(payload['arms'])} arms + baseline on {payload['n_cases']} cases; {payload['calls_made']} model "
              f"calls sent, {payload['calls_replayed']} replayed from the call cache, {reused} arms reused whole")
    return payload


def stored_leagues(db: str | os.PathLike[str], *, model: str | None = None) -> pd.DataFrame:
    """The leagues in ``db`` (of ``model`` when given): one row per benchmark, context budget and seeding,
    the latest written when several leagues share them; empty when none is stored.
    """
    from agentlab.bench.store.results import ResultStore

    columns = ["league_id", "benchmark", "model", "context_budget", "seeding", "n_cases", "primary_metric", "written"]
    if not Path(db).is_file():
        raise FileNotFoundError(f"no results database at {db}: run ensure_league (or `python -m agentlab.bench league`) "
                                "with this db first")
    with ResultStore(Path(db), read_only=True) as store:
        if not store.has_table("leagues"):
            return pd.DataFrame(columns=columns)
        frame = store.df(f"SELECT {', '.join(columns)} FROM leagues ORDER BY written, league_id")
    if model is not None:
        frame = frame[frame["model"] == model]
    frame = frame.drop_duplicates(["benchmark", "model", "context_budget", "seeding"], keep="last")
    return frame.sort_values(["benchmark", "context_budget"]).reset_index(drop=True)


def find_league(db: str | os.PathLike[str], benchmark: str, context_budget: int, *, model: str | None = None,
                seeding: str = "forced") -> str:
    """The id of the stored league of ``benchmark`` at ``context_budget``; ``LookupError`` naming those stored."""
    leagues = stored_leagues(db, model=model)
    hit = leagues[(leagues["benchmark"] == benchmark) & (leagues["context_budget"] == context_budget)
                  & (leagues["seeding"] == seeding)]
    if hit.empty:
        have = ", ".join(f"{b} at {int(n)}" for b, n in zip(leagues["benchmark"], leagues["context_budget"],
                                                            strict=True)) or "none"
        raise LookupError(f"no {seeding} league of {benchmark} at a {context_budget}-token budget in {db} "
                          f"(stored: {have}); run ensure_league first")
    return str(hit["league_id"].iloc[-1])


def league_table(db: str | os.PathLike[str], league_id: str) -> pd.DataFrame:
    """Every row (arm × metric) of one stored league, as :func:`agentlab.bench.analysis.league_df` reads it."""
    from agentlab.bench import analysis

    rows = analysis.league_df(league_id=league_id, db=Path(db))
    if rows.empty:
        raise LookupError(f"league {league_id} has no rows in {db}")
    return rows


#: How :func:`styled` prints each column of the league table.
FORMATS = {"prompt_savings": "{:.1%}", "evidence_kept": "{:.0%}", "peak_prompt_tokens_mean": "{:,.0f}",
           "peak_prompt_tokens_max": "{:,.0f}", "summary_calls": "{:.2f}", "summary_tokens": "{:,.0f}",
           "delta": "{:+.4f}", "ci_low": "{:+.4f}", "ci_high": "{:+.4f}", "p_value": "{:.3f}", "recovery": "{:.2f}"}


def styled(table: pd.DataFrame, caption: str = "") -> Any:
    """``table`` for reading: savings and evidence as percentages, tokens with thousands separators, deltas
    signed to 4 decimals, empty cells as "–" (the numbers themselves stay in ``table``); ``caption`` its title.
    """
    shown = table.style.format({c: f for c, f in FORMATS.items() if c in table.columns}, na_rep="–").hide(axis="index")
    return shown.set_caption(caption) if caption else shown


# ------------------------------------------------------------------------------------ the plot


def _percent_axis(ax: Axes, axis: str) -> None:
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    target = ax.xaxis if axis == "x" else ax.yaxis
    target.set_major_locator(MaxNLocator(nbins=6))
    ticks = [t for t in target.get_majorticklocs()]
    decimals = percent_decimals(ticks)
    target.set_major_formatter(FuncFormatter(lambda v, _: f"{100 * v:.{decimals}f}%"))


def plot_league(rows: pd.DataFrame, *, ax: Axes | None = None, title: str = "", x: str = "prompt_savings") -> Axes:
    """Quality delta (y, higher is better) against prompt savings (x), one point per arm of one metric.

    ``x="net_cost_usd"`` draws the net cost per case instead (the rows need the column:
    ``agentlab.bench.scoring.call_costs.with_run_costs(rows, ResultStore(db).query)``; no interval on that axis,
    and the frontier stays the savings one, so it is not joined).

    Error bars are the paired 95 % intervals on both axes (none where there is no interval, e.g. the
    baseline itself); filled markers are on the league's Pareto frontier, joined by a dashed line.
    Arms at the same point are drawn once and labelled together; labels are placed clear of each
    other and of the markers.
    """
    import matplotlib.pyplot as plt

    ax = ax or plt.subplots(figsize=(9, 5))[1]
    rows = rows.reset_index(drop=True)
    if rows.empty:
        ax.text(0.5, 0.5, "no arms in this league", ha="center", va="center", transform=ax.transAxes)
        return ax
    metrics = sorted(set(rows["metric"]))
    if len(metrics) != 1:
        raise ValueError(f"plot_league draws one metric; got {metrics}: filter the league first")
    if x not in ("prompt_savings", "net_cost_usd") or x not in rows.columns:
        raise ValueError(f"plot_league x={x!r}: use prompt_savings or net_cost_usd (a column of the rows; add the "
                         "cost with agentlab.bench.scoring.call_costs.with_run_costs)")
    if x != "prompt_savings" and rows[x].isna().any():
        raise ValueError(f"plot_league x={x!r}: some arms have no cost (their model has no price in data/prices.toml)")
    savings_axis = x == "prompt_savings"
    if not savings_axis:  # no interval on a cost axis
        rows = rows.assign(savings_ci_low=None, savings_ci_high=None)
    xs = rows[x].astype(float)
    ys = rows["delta"].astype(float)

    def bar(centre: float, low: Any, high: Any) -> list[list[float]]:
        below = 0.0 if pd.isna(low) else max(centre - float(low), 0.0)
        above = 0.0 if pd.isna(high) else max(float(high) - centre, 0.0)
        return [[below], [above]]

    for i, row in rows.iterrows():
        colour = ROLE_COLOURS.get(row["role"], "grey")
        ax.errorbar(xs[i], ys[i], xerr=bar(xs[i], row.get("savings_ci_low"), row.get("savings_ci_high")),
                    yerr=bar(ys[i], row["ci_low"], row["ci_high"]), fmt="o", color=colour, markersize=8, capsize=3,
                    markerfacecolor=colour if row["pareto"] else "white", zorder=3, elinewidth=1, alpha=0.85)
    groups = coincident_groups(xs.tolist(), ys.tolist())
    front = rows.loc[[g[0] for g in groups if rows.loc[g, "pareto"].any()]].sort_values("prompt_savings")
    if len(front) > 1 and savings_axis:
        ax.plot(front["prompt_savings"], front["delta"], color="black", linewidth=0.8, linestyle="--", zorder=2)
    ax.axhline(0, color="grey", linewidth=0.8)
    ax.axvline(0, color="grey", linewidth=0.8)
    for axis, values, lows, highs in (("x", xs, rows.get("savings_ci_low"), rows.get("savings_ci_high")),
                                      ("y", ys, rows["ci_low"], rows["ci_high"])):
        reach = [float(v) for v in [*values, *(lows if lows is not None else []), *(highs if highs is not None else [])]
                 if not pd.isna(v)]
        low, high = min(reach), max(reach)
        pad = max(high - low, 0.02) * 0.12
        (ax.set_xlim if axis == "x" else ax.set_ylim)(low - pad, high + pad)
    if savings_axis:
        _percent_axis(ax, "x")
        ax.set_xlabel("prompt-token savings vs the baseline (mean per case; bars: paired 95 % interval)")
    else:
        ax.set_xlabel("net cost per case, USD (provider-reported cached tokens at data/prices.toml prices)")
    ax.set_ylabel(f"quality Δ {metrics[0]} (arm − baseline;\nhigher is better; bars: paired 95 % interval)")
    ax.ticklabel_format(axis="y", style="plain", useOffset=False)
    ax.set_title(title or f"{metrics[0]}: quality against savings (filled = Pareto frontier)")
    if not savings_axis and not title:
        ax.set_title(ax.get_title().replace("against savings", "against net cost"))
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], marker="o", linestyle="", color=c, label=r) for r, c in ROLE_COLOURS.items()
               if r in set(rows["role"])]
    handles.append(Line2D([], [], marker="o", linestyle="", color="black", markerfacecolor="white",
                          label="not on the frontier"))
    # Outside the axes, right of them: inside, it covered the points near the origin (the baseline's).
    ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), title="role (filled =\n"
              "Pareto frontier)", title_fontsize=8, frameon=False)
    figure = ax.get_figure(root=True)
    assert figure is not None
    if len(figure.axes) == 1:
        figure.tight_layout()
    anchors, labels = [], []
    for group in groups:
        names = list(rows.loc[group, "arm"])
        anchors.append((float(xs[group[0]]), float(ys[group[0]])))
        labels.append(names[0] if len(names) == 1 else f"{len(names)} arms at one point:\n" + "\n".join(names))
    label_points(ax, anchors, labels, fontsize=8)
    return ax


# ------------------------------------------------------------------------------------ one case


@dataclass(frozen=True)
class ArmRequest:
    """What one arm sent the model for one case: the projected answer request."""

    arm: str
    messages: list[Any]
    #: ``None`` when the arm's answer request cannot be built without model output (a task mode whose
    #: question prompt waits for its summary); ``actions`` then says why.
    prompt_tokens: int | None
    #: The prompt tokens the league run's answer call reported for this case (``None``: not stored).
    stored_prompt_tokens: int | None
    #: What each mechanism did (its ``describe()`` name → a one-line account).
    actions: dict[str, str]


def league_cases(db: str | os.PathLike[str], league_id: str) -> list[str]:
    """The ids of the cases league ``league_id`` compared (the case dropdown), in run order."""
    import json

    from agentlab.bench.store.results import ResultStore

    with ResultStore(Path(db), read_only=True) as store:
        found = store.query("SELECT spec FROM leagues WHERE league_id = ?", [league_id])
    if not found:
        raise LookupError(f"no league {league_id} in {db}")
    return list(json.loads(found[0][0]).get("case_ids") or [])


def _account(report: Any) -> str:
    parts = []
    if report.hidden_event_ids:
        parts.append(f"hid {len(report.hidden_event_ids)} events")
    if report.replaced:
        parts.append(f"replaced {len(report.replaced)}")
    if report.summary is not None:
        parts.append(f"injected a summary ({len(report.summary.text)} characters)")
    if report.system_text:
        parts.append(f"added {len(report.system_text)} system text(s)")
    if report.rebuilt_request:
        parts.append("rebuilt the request")
    return ", ".join(parts) or "did nothing"


def stored_answer_tokens(db: str | os.PathLike[str], league_id: str, case_id: str) -> dict[str, int]:
    """Arm → the largest prompt of its league run's answer calls for ``case_id`` (arms without one left out)."""
    from agentlab.bench import analysis

    rows = league_table(db, league_id).drop_duplicates("arm")
    run_arm = dict(zip(rows["run_id"], rows["arm"], strict=True))
    calls = analysis.calls_df(str(rows["benchmark"].iloc[0]), db=Path(db))
    calls = calls[(calls["case_id"] == case_id) & (calls["purpose"] == "answer") & calls["run_id"].isin(run_arm)]
    peaks = calls.groupby("run_id")["prompt_tokens"].max()
    return {run_arm[run_id]: int(tokens) for run_id, tokens in peaks.items()}


def case_requests(benchmark: str, case_id: str, arms: Sequence[str], *, context_budget: int, model: str,
                  stored: dict[str, int] | None = None) -> list[ArmRequest]:
    """The answer request each arm builds for ``case_id``: its seeded history projected (forced seeding).

    A task mode (the baseline) shows the answer prompt its own code builds (``Task.dry_run_prompts``).
    The benchmark's settings file (no ``--set``) gives the arms' settings; ``model`` is the
    summariser of the summarising arms (through the call cache, so a summary the league's run made
    replays). The window the mechanisms see is ``context_budget``. ``stored``: arm → the prompt
    tokens its run's answer call reported (:func:`stored_answer_tokens`), shown next to the projection's.
    """
    from agentlab.bench.config import load_settings
    from agentlab.bench.running.loops import run_sync
    from agentlab.bench.tasks import get_task
    from agentlab.core import project
    from agentlab.model.registry import get_model
    from agentlab.model.tokens import count_messages

    task = get_task(benchmark)
    settings = load_settings(task.name, task.default_settings())
    case = next((c for c in task.load_cases(settings).cases if c.id == case_id), None)
    if case is None:
        raise LookupError(f"{benchmark} has no case {case_id!r}")
    answer_model = get_model(model)
    history = task.history(case, settings)
    instruction = task.arm_instruction(case, settings)
    stored = stored or {}
    roles = task.roles()
    baseline = roles.baseline if roles is not None else None
    out = []
    for name in arms:
        arm = task.arm(name)
        if not arm.generic:  # a task mode (the baseline): its own code builds its prompt
            prompts = task.dry_run_prompts(case, name, settings)
            if name != baseline:
                out.append(ArmRequest(name, [], None, stored.get(name), {
                    f"{name} mode": f"{task.name}'s own code builds its answer request from model output "
                                    f"(it sends {len(prompts)} prompts before any); not projected here"}))
                continue
            if len(prompts) != 1:
                raise ValueError(f"{benchmark}: the baseline mode {name} sends {len(prompts)} prompts before any "
                                 "model output, not one answer request")
            messages = list(prompts[0])
            out.append(ArmRequest(name, messages, count_messages(messages), stored.get(name),
                                  {f"{name} mode": "its own prompt (the task's dry run), no mechanism"}))
            continue
        mechanisms = arm.mechanisms(settings, answer_model)
        result = run_sync(project(list(history), mechanisms, case.question, model=answer_model,
                                  context_window=context_budget, instruction=instruction))
        out.append(ArmRequest(name, list(result.request.messages), result.prompt_tokens, stored.get(name),
                              {r.mechanism: _account(r) for r in result.reports}))
    return out


def shorten(text: str, limit: int = 240) -> str:
    """``text`` on one line, cut in the middle to at most ``limit`` characters (head […] tail)."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    keep = (limit - 5) // 2
    return f"{flat[:keep]} […] {flat[-keep:]}"


def message_rows(messages: Sequence[Any], *, head: int = 3, tail: int = 4, limit: int = 240) -> list[tuple[str, str]]:
    """(role, shortened text) of the first ``head`` and last ``tail`` messages, with one row for those between."""
    def one(message: Any) -> tuple[str, str]:
        text = message.content or ""
        if message.tool_calls:
            text = (text + " " if text else "") + "calls " + ", ".join(c.name for c in message.tool_calls)
        return message.role, shorten(text, limit)

    if len(messages) <= head + tail + 1:
        return [one(m) for m in messages]
    return [*(one(m) for m in messages[:head]), ("…", f"{len(messages) - head - tail} more messages"),
            *(one(m) for m in messages[-tail:])]


def requests_html(requests: Sequence[ArmRequest], *, limit: int = 240) -> str:
    """The requests side by side: per arm its message and token counts, what its mechanisms did, and the
    messages (the first and last ones, each cut to ``limit`` characters).
    """
    columns = []
    for request in requests:
        stored = "" if request.stored_prompt_tokens is None else f" (its run: {request.stored_prompt_tokens:,})"
        actions = "".join(f"<li>{html.escape(k)}: {html.escape(v)}</li>" for k, v in request.actions.items())
        rows = "".join(
            f'<tr><td style="vertical-align:top;font-weight:bold;font-size:11px;padding-right:6px">{html.escape(role)}</td>'
            f'<td style="text-align:left;font-size:11px">{html.escape(text)}</td></tr>'
            for role, text in message_rows(request.messages, limit=limit))
        size = ("answer request not projected" if request.prompt_tokens is None
                else f"{len(request.messages):,} messages, {request.prompt_tokens:,} prompt tokens")
        columns.append(
            '<div style="flex:0 0 320px;border:1px solid #ccc;padding:6px">'
            f"<b>{html.escape(request.arm)}</b><br>{size}{stored}"
            f'<ul style="margin:2px 0;font-size:11px">{actions}</ul>'
            f'<table style="border-collapse:collapse">{rows}</table></div>')
    return ('<div style="display:flex;flex-wrap:wrap;gap:10px;align-items:flex-start;font-size:12px">'
            f'{"".join(columns)}</div>')


def requests_summary(requests: Sequence[ArmRequest]) -> pd.DataFrame:
    """One row per arm: message count, projected prompt tokens and those its run reported."""
    return pd.DataFrame([{"arm": r.arm, "messages": len(r.messages), "prompt_tokens": r.prompt_tokens,
                          "run_answer_prompt_tokens": r.stored_prompt_tokens} for r in requests])


# ------------------------------------------------------------------------------------ the widget


class LeagueView:
    """Pick benchmark, context budget, metric and a case; see the league table, its Pareto plot and,
    for the case, what each arm sent the model.

    Reads the leagues of ``model`` stored in ``db`` (:func:`ensure_league` makes them). ``render`` and
    ``render_case`` are what the widget calls, so code (and the tests) can drive them directly.
    """

    def __init__(self, db: str | os.PathLike[str], *, model: str) -> None:
        self.db = Path(db)
        self.model = model
        self.leagues = stored_leagues(self.db, model=model)
        self.benchmarks = sorted(set(self.leagues["benchmark"]))
        if not self.benchmarks:
            raise ValueError(f"no league of {model} in {db}: run ensure_league first")
        self._rows: dict[str, pd.DataFrame] = {}

    def budgets(self, benchmark: str) -> list[int]:
        """The context budgets ``benchmark`` has a league at (the budget dropdown)."""
        chosen = self.leagues[self.leagues["benchmark"] == benchmark]
        return sorted({int(b) for b in chosen["context_budget"].dropna()})

    def league_id(self, benchmark: str, context_budget: int) -> str:
        """The stored league of ``benchmark`` at ``context_budget``."""
        return find_league(self.db, benchmark, context_budget, model=self.model)

    def rows(self, benchmark: str, context_budget: int) -> pd.DataFrame:
        """Every row of that league (read once, then kept)."""
        league = self.league_id(benchmark, context_budget)
        if league not in self._rows:
            self._rows[league] = league_table(self.db, league)
        return self._rows[league]

    def primary_metric(self, benchmark: str, context_budget: int) -> str | None:
        """The metric the league itself ranks by (its ``primary_metric``; the metric dropdown's default)."""
        chosen = self.leagues[(self.leagues["benchmark"] == benchmark)
                              & (self.leagues["context_budget"] == context_budget)]
        value = chosen["primary_metric"].iloc[-1] if len(chosen) else None
        return None if value is None or pd.isna(value) else str(value)

    def metrics(self, benchmark: str, context_budget: int) -> list[str]:
        """The metrics the league has a delta for (the metric dropdown)."""
        return sorted(set(self.rows(benchmark, context_budget)["metric"]))

    def cases(self, benchmark: str, context_budget: int) -> list[str]:
        """The cases the league compared (the case dropdown)."""
        return league_cases(self.db, self.league_id(benchmark, context_budget))

    def table(self, benchmark: str, context_budget: int, metric: str) -> pd.DataFrame:
        """The league table of ``metric``: one row per arm, baseline first, in :data:`TABLE_COLUMNS`."""
        rows = self.rows(benchmark, context_budget)
        rows = rows[rows["metric"] == metric]
        return rows[[c for c in TABLE_COLUMNS if c in rows.columns]].reset_index(drop=True)

    def render(self, benchmark: str, context_budget: int, metric: str) -> dict[str, Any]:
        """The league table of ``metric`` (``table``; ``styled``: the same, formatted) and its Pareto figure."""
        import matplotlib.pyplot as plt

        rows = self.rows(benchmark, context_budget)
        rows = rows[rows["metric"] == metric]
        fig, ax = plt.subplots(figsize=(10, 5.5))
        n = int(rows["n_cases"].max()) if len(rows) and "n_cases" in rows else 0
        where = f"{benchmark}, {context_budget:,}-token budget, {n} cases · {metric}"
        plot_league(rows, ax=ax, title=titled(f"{where}: quality Δ against prompt savings", self.model))
        plt.close(fig)  # shown where it is displayed, not again at the end of the cell
        table = self.table(benchmark, context_budget, metric)
        return {"table": table, "styled": styled(table, caption=titled(f"league: {where}", self.model)),
                "figure": fig, "rows": rows}

    def render_case(self, benchmark: str, context_budget: int, case_id: str) -> dict[str, Any]:
        """What each arm of the league sent the model for ``case_id``: a summary table and the side-by-side HTML."""
        league = self.league_id(benchmark, context_budget)
        arms = list(dict.fromkeys(self.rows(benchmark, context_budget)["arm"]))
        requests = case_requests(benchmark, case_id, arms, context_budget=context_budget, model=self.model,
                                 stored=stored_answer_tokens(self.db, league, case_id))
        return {"requests": requests, "summary": requests_summary(requests), "html": requests_html(requests)}

    def widget(self, *, metric: str | None = None, context_budget: int | None = None) -> Any:
        """Dropdowns for benchmark, budget, metric and case; the league (figure, table) and the case view."""
        import ipywidgets as w
        from IPython.display import HTML, display

        benchmark = w.Dropdown(options=self.benchmarks, description="benchmark")
        budget_box = w.Dropdown(description="budget")
        metric_box = w.Dropdown(description="metric")
        case_box = w.Dropdown(description="case", layout=w.Layout(width="420px"))
        league_out, case_out = w.Output(), w.Output()
        quiet = {"on": False}  # while the options are refilled, their change events draw nothing

        def fill(keep_metric: str | None, keep_budget: int | None) -> None:
            options = self.budgets(benchmark.value)
            budget_box.options = [(f"{b:,}", b) for b in options]
            budget_box.value = keep_budget if keep_budget in options else options[0]
            metrics = self.metrics(benchmark.value, budget_box.value)
            metric_box.options = metrics
            primary = self.primary_metric(benchmark.value, budget_box.value)
            metric_box.value = (keep_metric if keep_metric in metrics else primary if primary in metrics
                                else metrics[0])
            cases = self.cases(benchmark.value, budget_box.value)
            keep_case = case_box.value
            case_box.options = cases
            case_box.value = keep_case if keep_case in cases else (cases[0] if cases else None)

        def draw_league() -> None:
            league_out.clear_output(wait=True)
            with league_out:
                shown = self.render(benchmark.value, budget_box.value, metric_box.value)
                display(shown["figure"], shown["styled"])

        def draw_case() -> None:
            case_out.clear_output(wait=True)
            with case_out:
                if case_box.value is None:
                    print("no cases in this league")
                    return
                shown = self.render_case(benchmark.value, budget_box.value, case_box.value)
                display(shown["summary"], HTML(shown["html"]))

        def refill(change: Any) -> None:
            if quiet["on"]:
                return
            quiet["on"] = True
            try:
                fill(metric_box.value, budget_box.value if change["owner"] is budget_box else None)
            finally:
                quiet["on"] = False
            draw_league()
            draw_case()

        def redraw(draw: Any) -> Any:
            def on_change(change: Any) -> None:
                if not quiet["on"]:
                    draw()
            return on_change

        quiet["on"] = True
        try:
            fill(metric, context_budget)
        finally:
            quiet["on"] = False
        benchmark.observe(refill, names="value")
        budget_box.observe(refill, names="value")
        metric_box.observe(redraw(draw_league), names="value")
        case_box.observe(redraw(draw_case), names="value")
        draw_league()
        draw_case()
        return w.VBox([w.HBox([benchmark, budget_box, metric_box]), league_out,
                       w.HTML("<b>What each arm sent the model for one case</b>"), case_box, case_out])
