"""Shared code of the notebooks in ``notebooks/``, kept here so each notebook stays short.

* set-up: :func:`setup` (working directory, data and cache locations, plot defaults) and the
  smoke-test label for anything made with the embedded model;
* the published numbers: :func:`published` reads one table of ``data/published_results.toml``
  as a DataFrame (its source repository, path and commit in ``df.attrs``);
* benchmark runs: :func:`ensure_results` creates missing results with the CLI
  (``agentlab.bench.cli.main``), :func:`qmsum_subset_manifest` points the QMSum loader at a few
  meetings;
* tables and plots the analysis notebooks share;
* the runtime tour's pieces: a diagnostic agent that runs tool calls the caller names (the
  embedded model cannot emit tool calls), an LLM agent that keeps every projected request, and
  pictures of the ledger against the context.

The compaction explorer has its own module, :mod:`agentlab.explorer`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import html
import io
import json
import os
import re
import sys
from collections.abc import AsyncIterator, Coroutine, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import pandas as pd

from agentlab.events import OBJ_TOOL_RESPONSE, Event, Message, ToolCall
from agentlab.model import tokens
from agentlab.model.base import ModelRequest
from agentlab.runtime import FunctionTool, Invocation, LLMAgent, RequestDraft, ToolContext

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from agentlab.session.base import Session, Summary

T = TypeVar("T")

REPO_ROOT = Path(__file__).resolve().parents[1]
PUBLISHED_FILE = REPO_ROOT / "data" / "published_results.toml"
#: The shared read-only dataset copies beside a checkout (what ``make test`` points at).
SHARED_DATASETS = REPO_ROOT.parent / "shared" / "datasets"

SMOKE_LABEL = (
    "SMOKE TEST — made with the embedded SmolLM2-135M model (offline, 8,192-token window, no tool "
    "calling). These numbers show that the pipeline runs end to end; they say nothing about the "
    "mechanisms' quality and are not comparable with the published numbers."
)

#: One colour per mode, the same in every notebook.
MODE_COLOURS: dict[str, str] = {
    "long_context": "#4c72b0", "baseline": "#4c72b0", "summary": "#dd8452", "recall": "#55a868",
    "session_recall": "#55a868", "memory": "#8172b3", "memory_original": "#937860",
}


# ============================================================================== set-up


#: ``$AGENTLAB_DATA_DIR`` as the kernel started (setup() returns to it, so rerunning a cell that
#: pointed it elsewhere does not compound).
_INITIAL_DATA_DIR = os.environ.get("AGENTLAB_DATA_DIR")


def setup(*, cache_db: str | os.PathLike[str] | None = None, data_dir: str | os.PathLike[str] | None = None,
          manifest: str | os.PathLike[str] | None = None) -> Path:
    """Prepare a notebook kernel; returns the repository root.

    Works from the repository root so relative paths (``results/...``) mean the same thing in a
    notebook, the CLI and CI. Points the dataset loaders at ``data_dir`` (else at
    ``$AGENTLAB_DATA_DIR`` as the kernel started, else at the shared copies beside the checkout
    when they exist, as the Makefile does), at ``manifest`` instead of ``data/manifest.toml`` when
    given, and the call cache at ``cache_db`` when given.
    """
    os.chdir(REPO_ROOT)
    if data_dir is not None:
        os.environ["AGENTLAB_DATA_DIR"] = str(Path(data_dir).resolve())
    elif _INITIAL_DATA_DIR:
        os.environ["AGENTLAB_DATA_DIR"] = _INITIAL_DATA_DIR
    elif SHARED_DATASETS.is_dir():
        os.environ["AGENTLAB_DATA_DIR"] = str(SHARED_DATASETS)
    if manifest is not None:
        os.environ["AGENTLAB_MANIFEST"] = str(Path(manifest).resolve())
    else:
        os.environ.pop("AGENTLAB_MANIFEST", None)
    if cache_db is not None:
        os.environ["AGENTLAB_CACHE_DB"] = str(Path(cache_db).resolve())
    import matplotlib.pyplot as plt

    plt.rcParams.update({"figure.figsize": (9, 3.6), "figure.dpi": 100, "axes.grid": True, "grid.alpha": 0.3,
                         "axes.spines.top": False, "axes.spines.right": False, "font.size": 10})
    pd.set_option("display.max_colwidth", 90)
    pd.set_option("display.width", 160)
    return REPO_ROOT


def is_smoke(model_spec: str) -> bool:
    """Whether results of this model are smoke tests (the embedded model)."""
    return model_spec.strip() == "embedded"


def smoke_banner(model_spec: str) -> Any:
    """An HTML banner saying that results are a smoke test (empty for a real model)."""
    from IPython.display import HTML

    if not is_smoke(model_spec):
        return HTML(f"<p><b>Model:</b> {html.escape(model_spec)}</p>")
    return HTML('<div style="border:2px solid #c44e52;background:#fbeaea;padding:8px;margin:4px 0">'
                f"<b>{html.escape(SMOKE_LABEL)}</b></div>")


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion from synchronous code, also inside a running event loop.

    Jupyter runs an event loop in the kernel's thread, where ``asyncio.run`` is refused; then the
    coroutine gets a fresh loop in a worker thread.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


# ======================================================================= published numbers


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
    """``repo@commit:path (reference §x)`` of a published table."""
    attrs = (published(df_or_id) if isinstance(df_or_id, str) else df_or_id).attrs
    return (f"{attrs['repo']}@{attrs['commit'][:7]}:{attrs['path']} "
            f"(reference §{attrs['reference_section']}; {attrs['model']})")


def show_published(table_id: str) -> Any:
    """A published table with its source underneath, ready to display."""
    from IPython.display import HTML

    df = published(table_id)
    return HTML(f"<b>Published: {html.escape(table_id)}</b>{df.to_html(index=False, na_rep='–')}"
                f"<small>Source: {html.escape(published_source(df))}</small>")


# ============================================================================ benchmark runs


def _run_cli(args: Sequence[str]) -> tuple[int, str, str]:
    from agentlab.bench import cli

    out, err = io.StringIO(), io.StringIO()

    def call() -> int:
        with contextlib.redirect_stderr(err):
            return cli.main(list(args), out=out)

    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        status = pool.submit(call).result()
    return status, out.getvalue(), err.getvalue()


def run_cli(args: Sequence[str]) -> tuple[int, str]:
    """``python -m agentlab.bench <args>`` in-process; returns (exit status, printed text).

    The CLI calls ``asyncio.run``, which a Jupyter kernel's running loop refuses, so it runs in a
    worker thread; its output is captured and returned rather than printed from that thread.
    """
    status, out, err = _run_cli(args)
    return status, out + err


def ensure_results(benchmark: str, modes: Sequence[str], *, model: str, limit: int, db: str | os.PathLike[str],
                   overrides: Iterable[str] = (), judge_model: str | None = None, echo: bool = True) -> pd.DataFrame:
    """Make sure ``db`` holds results of every mode: run the CLI once per mode.

    Runs are identified by their configuration and resumable, so the CLI itself decides what is
    missing: cases already stored ``ok`` are skipped (a rerun costs a data load), missing or failed
    ones are run (model calls replay from the call cache when they were made before). Returns one
    row per mode — run id, cases selected / already done / run now / failed, failure codes — and
    rebuilds the derived tables.
    """
    from agentlab.bench import analysis

    Path(db).parent.mkdir(parents=True, exist_ok=True)
    rows = []
    for mode in modes:
        args = [benchmark, "--mode", mode, "--limit", str(limit), "--model", model, "--db", str(db),
                "--no-progress", "--json"]
        if judge_model:
            args += ["--judge-model", judge_model]
        for assignment in overrides:
            args += ["--set", assignment]
        status, out, err = _run_cli(args)
        if echo:
            print(f"$ python -m agentlab.bench {' '.join(args)}")
        if status != 0:
            message = (err or out).strip().splitlines()[-1] if (err or out).strip() else f"exit status {status}"
            print(f"  failed: {message}")
            rows.append({"mode": mode, "status": status, "error": message})
            continue
        run = json.loads(out)
        if echo:
            print(f"  run {run['run_id']}: {run['already_done']} already stored, {run['ok']} ok and "
                  f"{run['failed']} failed now, of {run['selected']} selected")
        rows.append({"mode": mode, "status": status, "run_id": run["run_id"], "selected": run["selected"],
                     "already_done": run["already_done"], "ran_ok": run["ok"], "ran_failed": run["failed"],
                     "failures": ", ".join(f"{k} {v}" for k, v in sorted(run["errors"].items())),
                     "prompt_tokens": run["prompt_tokens"], "completion_tokens": run["completion_tokens"]})
    if Path(db).exists():
        analysis.rebuild(db, roles=mode_roles())
    return pd.DataFrame(rows)


def mode_roles() -> dict[str, Any]:
    """Baseline / lossy / recovered modes of every registered benchmark (as ``report`` uses them)."""
    from agentlab.bench.config import MODE_ROLES
    from agentlab.bench.tasks import discover

    roles: dict[str, Any] = dict(MODE_ROLES)
    for name, cls in discover().items():
        task_roles = cls().roles()
        if task_roles is not None:
            roles[name] = task_roles
    return roles


def supported_settings(benchmark: str, assignments: Iterable[str]) -> list[str]:
    """The ``section.field=value`` assignments the benchmark's settings know; prints the others.

    Smoke-run shortcuts may name a field a task does not (yet) have; the CLI would refuse the
    whole run, so such an assignment is left out, loudly.
    """
    from agentlab.bench.config import load_settings
    from agentlab.bench.tasks import get_task

    task = get_task(benchmark)
    settings = load_settings(task.name, task.default_settings())
    kept = []
    for assignment in assignments:
        key = assignment.split("=", 1)[0].strip()
        section, _, name = key.partition(".")
        if section in settings and name in settings[section]:
            kept.append(assignment)
        else:
            print(f"note: {benchmark} has no setting {key!r}; not applied: {assignment}")
    return kept


def _load_manifest() -> dict[str, Any]:
    from agentlab.bench.datasets.base import DEFAULT_MANIFEST

    with DEFAULT_MANIFEST.open("rb") as fh:
        return tomllib.load(fh)


def _write_manifest(manifest: Mapping[str, Any], target: str | os.PathLike[str], note: str) -> Path:
    """A manifest in the shape of ``data/manifest.toml`` (dataset tables with ``[[files]]``)."""
    lines = [f"# {note}"]
    for name, spec in manifest.items():
        lines.append(f"\n[{name}]")
        lines.extend(f"{key} = {json.dumps(value)}" for key, value in spec.items() if key != "files")
        for entry in spec.get("files", ()):
            lines.append(f"\n[[{name}.files]]")
            lines.extend(f"{key} = {json.dumps(value)}" for key, value in entry.items())
    path = Path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def qmsum_subset_manifest(meeting_ids: Sequence[str], target: str | os.PathLike[str]) -> Path:
    """Write a copy of ``data/manifest.toml`` whose QMSum part lists only ``meeting_ids``.

    Point ``$AGENTLAB_MANIFEST`` at it and the unchanged CLI loads just those meetings (the
    genuine files, still sha256-checked), e.g. the shortest meeting for a smoke run on a small,
    slow model.
    """
    from agentlab.bench.datasets.base import DEFAULT_MANIFEST

    manifest = _load_manifest()
    wanted = {f"test/{m}.json" for m in meeting_ids}
    files = [f for f in manifest["qmsum"]["files"] if f["path"] in wanted]
    missing = wanted - {f["path"] for f in files}
    if missing:
        raise ValueError(f"QMSum meetings not in {DEFAULT_MANIFEST}: {', '.join(sorted(missing))}")
    manifest["qmsum"] = {**manifest["qmsum"], "files": files}
    return _write_manifest(manifest, target, f"data/manifest.toml with QMSum limited to {', '.join(meeting_ids)}")


def locomo_trimmed(sample_id: str, max_sessions: int, target_dir: str | os.PathLike[str]) -> tuple[Path, Path]:
    """A trimmed LoCoMo file for smoke runs: one conversation, its first ``max_sessions`` sessions,
    and only the questions whose evidence lies entirely in them.

    Reads the genuine ``locomo10.json`` (sha256-checked), writes ``<target_dir>/locomo/locomo10.json``
    and a manifest pinning the trimmed file's own sha256. Point ``$AGENTLAB_DATA_DIR`` at
    ``target_dir`` and ``$AGENTLAB_MANIFEST`` at the returned manifest: the unchanged CLI then runs
    on it, and its runs get their own ids (the data hash differs). Returns (data file, manifest).
    """
    import hashlib

    from agentlab.bench.datasets.base import read_json, resolve_file
    from agentlab.bench.tasks.locomo import evidence_dia_ids

    source = resolve_file("locomo", "locomo10.json")
    raw = read_json(source.local_path, "LoCoMo")
    chosen = next((c for c in raw if c.get("sample_id") == sample_id), None)
    if chosen is None:
        raise ValueError(f"no LoCoMo conversation {sample_id!r} in {source.local_path}")
    conversation = {}
    for key, value in chosen["conversation"].items():
        found = re.match(r"session_(\d+)", key)
        if found is None or int(found.group(1)) <= max_sessions:
            conversation[key] = value

    def inside(qa: Mapping[str, Any]) -> bool:
        sessions = [int(d[1:].split(":")[0]) for d in evidence_dia_ids(qa.get("evidence") or ())]
        return bool(sessions) and max(sessions) <= max_sessions

    trimmed = [{"sample_id": sample_id, "conversation": conversation, "qa": [q for q in chosen["qa"] if inside(q)]}]
    data_file = Path(target_dir) / "locomo" / "locomo10.json"
    data_file.parent.mkdir(parents=True, exist_ok=True)
    body = json.dumps(trimmed, ensure_ascii=False).encode("utf-8")
    data_file.write_bytes(body)
    manifest = _load_manifest()
    entry = {**manifest["locomo"]["files"][0], "sha256": hashlib.sha256(body).hexdigest(), "size": len(body),
             "url": f"file://{data_file}"}
    manifest["locomo"] = {**manifest["locomo"], "files": [entry]}
    note = f"LoCoMo trimmed to {sample_id}, sessions 1-{max_sessions} and their {len(trimmed[0]['qa'])} questions"
    return data_file, _write_manifest(manifest, Path(target_dir) / "manifest.toml", note)


# ======================================================================== tables and plots


def side_by_side(frames: Mapping[str, pd.DataFrame | str], *, max_rows: int = 40) -> Any:
    """Several tables (or HTML snippets) next to each other, each under its title."""
    from IPython.display import HTML

    cells = []
    for title, frame in frames.items():
        body = frame if isinstance(frame, str) else frame.head(max_rows).to_html(index=False, na_rep="–")
        cells.append(f'<div style="flex:1;min-width:320px;overflow-x:auto"><b>{html.escape(title)}</b>{body}</div>')
    return HTML(f'<div style="display:flex;gap:16px;align-items:flex-start">{"".join(cells)}</div>')


def published_savings_column(frame: pd.DataFrame) -> str:
    """The prompt-savings column of a ``token_savings`` frame that follows its benchmark's published
    token rule: ``prompt_savings_last`` where the report counts the last answer call of a run,
    else ``prompt_savings`` (the sum over a case's answer calls)."""
    rules = set(frame["published_token_rule"].dropna()) if "published_token_rule" in frame else set()
    return "prompt_savings_last" if rules == {"last_answer_call"} else "prompt_savings"


def mode_quality_and_savings(benchmark: str, metric: str, *, db: str | os.PathLike[str], model: str) -> pd.DataFrame:
    """Per mode: mean ``metric`` (failed cases count 0) and the mean per-case prompt savings vs the
    baseline mode (0 for the baseline itself), for one model, by the published token rule
    (``prompt_savings_rule`` names the column it came from)."""
    from agentlab.bench import analysis

    means = analysis.mode_means_df(benchmark, db=db)
    means = means[(means["model"] == model) & (means["metric"] == metric)]
    savings = analysis.token_savings_df(benchmark, level="aggregate", db=db)
    savings = savings[savings["model"] == model] if len(savings) else savings
    baseline = mode_roles()[benchmark].baseline
    column = published_savings_column(savings)
    rows = []
    for _, row in means.iterrows():
        mode = row["mode"]
        if mode == baseline:
            saving = 0.0
        else:
            match = savings[savings["mode"] == mode] if len(savings) else savings
            saving = float(match[column].iloc[0]) if len(match) else float("nan")
        rows.append({"mode": mode, metric: row["mean"], "prompt_savings": saving, "prompt_savings_rule": column,
                     "n_cases": row["n_cases"], "n_failed": row["n_failed"]})
    return pd.DataFrame(rows)


def plot_savings_distribution(per_case: pd.DataFrame, *, column: str | None = None, ax: Axes | None = None,
                              published_points: Mapping[str, float] | None = None, title: str = "") -> Axes:
    """Per-case savings of each mode as dots over a box; published aggregates as diamonds.

    ``column`` defaults to the savings column of the benchmark's published token rule
    (:func:`published_savings_column`), so the dots and the diamonds count tokens the same way.
    """
    import matplotlib.pyplot as plt
    import numpy as np

    column = column or published_savings_column(per_case)
    ax = ax or plt.subplots()[1]
    published_points = {m: v for m, v in (published_points or {}).items() if v is not None and not pd.isna(v)}
    cases = per_case[per_case["level"] == "case"] if "level" in per_case else per_case
    modes = list(dict.fromkeys(cases["mode"])) if len(cases) else []
    modes += [m for m in published_points if m not in modes]
    order = list(MODE_COLOURS)
    modes.sort(key=lambda m: order.index(m) if m in order else len(order))
    for i, mode in enumerate(modes):
        values = cases.loc[cases["mode"] == mode, column].dropna().astype(float).to_numpy()
        colour = MODE_COLOURS.get(mode, "grey")
        if len(values) > 1:
            ax.boxplot(values, positions=[i], widths=0.5, showfliers=False, medianprops={"color": colour})
        jitter = np.linspace(-0.12, 0.12, len(values)) if len(values) > 1 else np.zeros(len(values))
        ax.scatter(i + jitter, values, color=colour, alpha=0.8, zorder=3,
                   label="ours, per case" if i == 0 else None)
        if published_points and mode in published_points:
            ax.scatter([i], [published_points[mode]], marker="D", s=70, facecolor="none", edgecolor="black",
                       zorder=4, label="published (aggregate)" if not ax.get_legend_handles_labels()[1].count(
                           "published (aggregate)") else None)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(modes)), modes)
    ax.set_ylabel(column.replace("_", " "))
    ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:.0%}"))
    ax.set_title(title or f"{column.replace('_', ' ')} per case vs the baseline")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best", fontsize=8)
    return ax


def plot_quality_vs_savings(ours: pd.DataFrame, metric: str, *, published_frame: pd.DataFrame | None = None,
                            published_savings: str = "prompt_savings", published_metric: str | None = None,
                            ax: Axes | None = None, title: str = "") -> Axes:
    """Quality (y) against prompt savings (x) per mode: ours filled, published hollow."""
    import matplotlib.pyplot as plt

    ax = ax or plt.subplots()[1]
    for _, row in ours.iterrows():
        colour = MODE_COLOURS.get(row["mode"], "grey")
        ax.scatter(row["prompt_savings"], row[metric], s=80, color=colour, zorder=3)
        ax.annotate(f"{row['mode']} (ours)", (row["prompt_savings"], row[metric]), textcoords="offset points",
                    xytext=(6, 4), fontsize=8)
    if published_frame is not None and len(published_frame):
        column = published_metric or metric
        for _, row in published_frame.iterrows():
            x = row[published_savings]
            x = 0.0 if pd.isna(x) else x
            colour = MODE_COLOURS.get(row["mode"], "grey")
            ax.scatter(x, row[column], s=80, facecolor="none", edgecolor=colour, linewidth=2, zorder=3)
            ax.annotate(f"{row['mode']} (published)", (x, row[column]), textcoords="offset points",
                        xytext=(6, -10), fontsize=8, color="dimgrey")
    low, high = ax.get_xlim()
    ax.set_xlim(min(low, -0.05), max(high, 1.15))  # room for the labels right of the points
    ax.set_xlabel("prompt savings vs the baseline mode (mean per case)")
    ax.set_ylabel(metric)
    ax.xaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:.0%}"))
    ax.set_title(title or f"{metric} against savings: filled = ours, hollow = published")
    return ax


def plot_grouped_bars(frame: pd.DataFrame, category: str, columns: Sequence[str], *, ax: Axes | None = None,
                      title: str = "", ylabel: str = "", percent: bool = False,
                      colours: Sequence[str] | None = None) -> Axes:
    """One group of bars per ``category`` value, one bar per column (NaN bars are left out)."""
    import matplotlib.pyplot as plt
    import numpy as np

    ax = ax or plt.subplots()[1]
    x = np.arange(len(frame))
    width = 0.8 / max(1, len(columns))
    for i, column in enumerate(columns):
        values = frame[column].astype(float).to_numpy()
        colour = colours[i] if colours else MODE_COLOURS.get(column)
        ax.bar(x + (i - (len(columns) - 1) / 2) * width, np.nan_to_num(values, nan=0.0), width,
               label=column, color=colour, alpha=0.9)
    ax.set_xticks(x, [str(v) for v in frame[category]])
    ax.set_ylabel(ylabel)
    if percent:
        ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:.0%}"))
    ax.axhline(0, color="black", linewidth=0.8)
    low, high = ax.get_ylim()
    ax.set_ylim(low, high + 0.18 * (high - low))  # headroom so the legend does not cover bars
    ax.set_title(title)
    ax.legend(fontsize=8, ncols=min(4, len(columns)), loc="upper right")
    return ax


def case_metadata(cases: pd.DataFrame, *keys: str) -> pd.DataFrame:
    """``cases`` with the named fields of its JSON ``metadata`` column added as columns."""
    meta = [json.loads(m) if isinstance(m, str) else (m or {}) for m in cases["metadata"]]
    out = cases.copy()
    for key in keys:
        out[key] = [m.get(key) for m in meta]
    return out


# ============================================================================ runtime tour


class ObservedLLMAgent(LLMAgent):
    """An :class:`LLMAgent` that keeps every request it projected, with the draft behind it.

    ``projections[i]`` is ``(request, draft)`` of the i-th model call: the request is exactly what
    the model was sent; the draft's events carry the ledger ids (and compaction marks), so the
    request can be drawn against the history.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.projections: list[tuple[ModelRequest, RequestDraft]] = []

    async def build_request(self, inv: Invocation, *, allow_tools: bool = True) -> tuple[ModelRequest, RequestDraft]:
        request, draft = await super().build_request(inv, allow_tools=allow_tools)
        self.projections.append((request, draft))
        return request, draft


class DiagnosticAgent:
    """Runs the diagnostic tool calls the caller lists, then lets the LLM agent answer.

    The embedded model cannot emit tool calls, so the caller decides which diagnostics run:
    ``RunOptions(metadata={"diagnostics": [("read_certificate", {"host": ...})]})``. Each one is
    still a real tool call — persisted as an assistant tool-call event and a tool-result event,
    with deterministic ids (so replays hit the call cache) — and the model answers from it.
    Everything else (instruction, policies, model) is the wrapped agent's.
    """

    def __init__(self, llm: LLMAgent, tools: Sequence[FunctionTool]) -> None:
        self.llm = llm
        self.name = llm.name
        self.diagnostic_tools = {t.name: t for t in tools}

    def __getattr__(self, name: str) -> Any:
        # instruction, model, summary, compaction, recall ... are the LLM agent's
        return getattr(self.llm, name)

    async def run(self, inv: Invocation) -> AsyncIterator[Event]:
        label = str(inv.options.metadata.get("label", inv.id[-6:]))
        for n, (tool_name, arguments) in enumerate(inv.options.metadata.get("diagnostics", ())):
            tool = self.diagnostic_tools[tool_name]
            call = ToolCall(id=f"call-{label}-{n}", name=tool_name, arguments=json.dumps(arguments))
            yield Event(author=self.name, choices=[Message.assistant("", [call])], id=f"ev-{label}-call{n}",
                        invocation_id=inv.id, request_id=inv.request_id)
            result = await tool.call(call.parsed_arguments(), ToolContext(inv, call.id, call.name))
            content = result if isinstance(result, str) else json.dumps(result)
            yield Event(author=self.name, object=OBJ_TOOL_RESPONSE, choices=[Message.tool(call.id, call.name, content)],
                        id=f"ev-{label}-result{n}", invocation_id=inv.id, request_id=inv.request_id)
        async for event in self.llm.run(inv):
            yield event


_LOG_EVENTS = (
    ("INFO", "accepted connection from 10.2.{a}.{b}:5{c:04d}"),
    ("ERROR", "tls: handshake failed with upstream pay.example.com:443: x509: certificate has expired "
              "(not_after=2026-11-29T00:00:00Z)"),
    ("WARN", "retrying upstream pay.example.com:443 in {c}ms (attempt {a})"),
    ("INFO", "health check /healthz ok in {b}ms"),
    ("ERROR", "request {a}{b}{c} to POST /v1/payments failed: upstream TLS handshake error"),
    ("INFO", "config reload skipped: no change in routes.yaml (revision {a}{b})"),
)


def fetch_gateway_logs(host: str, lines: int = 30) -> str:
    """The recent log lines of the API gateway in front of a host (a deterministic stand-in).

    Args:
        host: The upstream host whose gateway log to read.
        lines: How many log lines to return.
    """
    out = []
    for i in range(lines):
        level, template = _LOG_EVENTS[(i * 7 + 3) % len(_LOG_EVENTS)]
        text = template.format(a=(i * 3) % 17 + 1, b=(i * 11) % 250 + 3, c=(i * 37) % 900 + 40)
        out.append(f"2026-11-29T08:{i // 6:02d}:{(i * 9) % 60:02d}Z gateway-{i % 3 + 1} {level:<5} {text} host={host}")
    return "\n".join(out)


def _kind(event: Event) -> str:
    m = event.message
    if m is None:
        return "other"
    if m.role == "user":
        return "user input"
    if m.role == "tool":
        return "tool result"
    if m.tool_calls:
        return "tool call"
    return "answer"


def _excerpt(text: str, limit: int = 90) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _event_text(event: Event) -> str:
    m = event.message
    if m is None:
        return ""
    if m.tool_calls:
        return "calls " + ", ".join(f"{c.name}({c.arguments})" for c in m.tool_calls)
    return m.content


KIND_COLOURS = {"user input": "#4c72b0", "tool call": "#8c8c8c", "tool result": "#dd8452", "answer": "#55a868",
                "other": "#cccccc"}


def ledger_df(session: Session, summary: Summary | None = None) -> pd.DataFrame:
    """The event ledger as a table: one row per event, with its request (turn), tokens and text."""
    turns: dict[str, int] = {}
    boundary = -1
    if summary is not None and summary.boundary is not None:
        boundary = session.event_index(summary.boundary.last_event_id)
    rows = []
    for i, e in enumerate(session.events):
        turn = turns.setdefault(e.request_id or e.invocation_id, len(turns) + 1)
        if e.message is None:
            # e.g. the stats record a compaction leaves as a state delta: in the ledger, never in a request
            rows.append({"#": i, "turn": turn, "event_id": e.id, "role": "", "kind": e.object, "tokens": 0,
                         "covered_by_summary": i <= boundary, "text": _excerpt(json.dumps(e.state_delta))})
            continue
        rows.append({"#": i, "turn": turn, "event_id": e.id, "role": e.role, "kind": _kind(e),
                     "tokens": e.token_count if e.token_count is not None else tokens.count_event(e),
                     "covered_by_summary": i <= boundary, "text": _excerpt(_event_text(e))})
    return pd.DataFrame(rows)


def request_df(request: ModelRequest, draft: RequestDraft | None = None) -> pd.DataFrame:
    """A model request as a table: one row per message, its tokens, and (with the draft) the
    ledger event it came from and whether compaction replaced its content."""
    history = [e for e in (draft.events if draft is not None else []) if e.message is not None
               and e.message.role != "system"]
    by_content: dict[tuple[str, str], Event] = {(e.message.role, e.message.content): e for e in history}  # type: ignore[union-attr]
    rows = []
    for i, m in enumerate(request.messages):
        source = by_content.get((m.role, m.content))
        rows.append({"#": i, "role": m.role, "tokens": tokens.count_message(m),
                     "from_event": source.id if source is not None else ("(instruction, summary, overview)"
                                                                        if m.role == "system" else ""),
                     "compacted": (source.metadata.get("compacted", "") if source is not None else ""),
                     "text": _excerpt(_event_text(Event(author="", choices=[m])))})
    if request.tools:
        rows.append({"#": len(rows), "role": "(tools)", "tokens": tokens.count_tools(request.tools),
                     "from_event": "", "compacted": "",
                     "text": ", ".join(t["function"]["name"] for t in request.tools)})
    return pd.DataFrame(rows)


def plot_history_and_context(session: Session, summary: Summary | None, draft: RequestDraft | None,
                             request: ModelRequest | None = None) -> Figure:
    """Two rows over the ledger's event positions: the tokens each event holds in the history,
    and the tokens it took in one request (absent, whole, or replaced by a placeholder).

    The shaded span is what the summary covers; the dashed line is its boundary. Token axes are
    logarithmic so a 15-token question and a 2,000-token tool result are both readable.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(11, 5.6), sharex=True)
    # x = position in the ledger, as in ledger_df (events without a message, such as compaction
    # stats, keep their position but draw nothing)
    ledger = [(i, e) for i, e in enumerate(session.events) if e.message is not None]
    positions = {e.id: i for i, e in ledger}
    boundary = -1
    if summary is not None and summary.boundary is not None:
        boundary = positions.get(summary.boundary.last_event_id, -1)

    def bar(ax: Axes, x: int, height: int, event: Event, compacted: bool = False) -> None:
        ax.bar(x, height, color=KIND_COLOURS[_kind(event)], hatch="///" if compacted else None,
               edgecolor="black" if compacted else None)
        ax.annotate(f"{height:,}", (x, height), textcoords="offset points", xytext=(0, 2), ha="center", fontsize=8)

    for i, e in ledger:
        bar(top, i, e.token_count or tokens.count_event(e), e)
    in_request = {e.id: e for e in (draft.events if draft is not None else [])}
    for i, e in ledger:
        projected = in_request.get(e.id)
        if projected is not None:
            bar(bottom, i, tokens.count_event(projected), e, bool(projected.metadata.get("compacted")))
    for ax in (top, bottom):
        ax.set_yscale("log")
        ax.set_ylim(1, max(10, max((e.token_count or 1) for _, e in ledger)) * 4)
        ax.set_ylabel("tokens (log)")
        if boundary >= 0:
            ax.axvspan(-0.5, boundary + 0.5, color="#f2e6a6", alpha=0.6, zorder=0)
            ax.axvline(boundary + 0.5, color="black", linestyle="--", linewidth=1)
    top.set_title("History: every event of the ledger (appended, never rewritten)")
    bottom.set_title("Context: what the last request carried of each event")
    if request is not None:
        system = sum(tokens.count_message(m) for m in request.messages if m.role == "system")
        note = (f"request: {tokens.count_messages(request.messages, request.tools or None):,} tokens\n"
                f"system message (instruction + summary\n+ recall overview): {system:,}\n"
                f"tool schemas: {tokens.count_tools(request.tools):,}")
        bottom.text(0.01, 0.95, note, transform=bottom.transAxes, va="top", fontsize=8,
                    bbox={"facecolor": "white", "alpha": 0.85, "edgecolor": "grey"})
    if boundary >= 0:
        top.text(boundary + 0.4, top.get_ylim()[1] / 3, "summary boundary ", ha="right", fontsize=8)
    bottom.set_xlabel("event position in the ledger")
    handles = [Patch(color=c, label=k) for k, c in KIND_COLOURS.items() if k != "other"]
    handles += [Patch(facecolor="#f2e6a6", label="covered by the summary"),
                Patch(facecolor="white", edgecolor="black", hatch="///", label="compacted (placeholder)")]
    top.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return fig


__all__ = [
    "DiagnosticAgent",
    "MODE_COLOURS",
    "ObservedLLMAgent",
    "PUBLISHED_FILE",
    "REPO_ROOT",
    "SMOKE_LABEL",
    "case_metadata",
    "ensure_results",
    "fetch_gateway_logs",
    "is_smoke",
    "ledger_df",
    "locomo_trimmed",
    "mode_quality_and_savings",
    "mode_roles",
    "plot_grouped_bars",
    "plot_history_and_context",
    "plot_quality_vs_savings",
    "plot_savings_distribution",
    "published",
    "published_source",
    "published_tables",
    "qmsum_subset_manifest",
    "request_df",
    "run_cli",
    "run_sync",
    "setup",
    "show_published",
    "side_by_side",
    "smoke_banner",
    "supported_settings",
]
