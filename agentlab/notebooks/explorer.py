"""The compaction-policy explorer behind ``notebooks/02_compaction_explorer.ipynb``.

It answers one question by looking: *for this long session and this policy, how many tokens
would the next request carry, and which mechanism took how many away?* Every number comes from
the real runtime code — the request processors of :class:`~agentlab.runtime.LLMAgent`
(:meth:`~agentlab.runtime.LLMAgent.build_draft`), the rolling
:class:`~agentlab.summary.SummaryWorker` with its trigger checks and safe prefix, the
compaction passes and the pre-model synchronous-summary path — with one substitution: the
summariser is a deterministic stand-in (:class:`~agentlab.model.ScriptedModel` writing a
fixed-size digest of its input), so no model is called and a control change redraws at once.

Pieces:

* :class:`~agentlab.notebooks.ledgers.Ledger` — a long session as events, built from real turns
  (``ledger_from_locomo``, ``ledger_from_turns``) with synthetic large tool results interleaved
  (a plain conversation has none, and compaction only acts on tool results);
* :class:`~agentlab.notebooks.policy_choice.PolicyChoice` — the knobs one side of the comparison
  sets, and :func:`~agentlab.notebooks.policy_choice.run_recipe`, the flags that run it;
* :func:`project` — the request's token count per stage (history → summary → pass 0 → pass 1 →
  pass 2 → sent);
* :class:`Explorer` — the ipywidgets controls for two policies side by side; its callback
  (:meth:`Explorer.refresh`) is a plain method, so tests drive it by setting control values.

The ledger and policy names are re-exported here: a notebook needs only this module.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pandas as pd

from agentlab.compaction import CompactionPolicy, relieve_context_pressure
from agentlab.events import OBJ_USER, Event, Message
from agentlab.model import tokens
from agentlab.model.base import ModelInfo, ModelRequest
from agentlab.model.scripted import ScriptedModel
from agentlab.notebooks.kernel import run_sync
from agentlab.notebooks.ledgers import Ledger, ledger_from_locomo, ledger_from_turns
from agentlab.notebooks.policy_choice import RECALL_CHOICES, PolicyChoice, RunRecipe, run_recipe
from agentlab.runtime import Invocation, LLMAgent, RunOptions
from agentlab.session.base import FULL_SESSION_KEY, Session, Summary
from agentlab.summary import Summarizer, SummaryPolicy, SummaryWorker

if TYPE_CHECKING:
    from matplotlib.figure import Figure

APP = "explorer"
USER = "researcher"
SESSION = "long-session"
INSTRUCTION = "You are a helpful assistant. Answer the user's question from the conversation."

#: Words of the stand-in summary (about 260 tokens; the published QMSum summaries averaged
#: ~1,780 characters, i.e. a few hundred tokens).
STANDIN_SUMMARY_WORDS = 200
STAGES = ("history", "summary", "pass 0", "pass 1", "pass 2", "sent")
STAGE_NOTES = {
    "history": "instruction + every ledger event + the question (no governance)",
    "summary": "summary injected; only the events after its boundary stay raw",
    "pass 0": "results of force_clean_tools replaced by a policy placeholder",
    "pass 1": "older tool results over tool_result_max_tokens replaced by a recoverable placeholder",
    "pass 2": "any result over oversized_tool_result_max_tokens cut to head + tail",
    "sent": "after the pre-model path: at >= 70 % of the window a synchronous summary runs and the request is rebuilt",
}


# ======================================================================== summary stand-in


def _standin_reply(request: ModelRequest) -> str:
    """A deterministic digest of the summariser's input: the opening words of its lines."""
    prompt = request.messages[-1].content if request.messages else ""
    found = re.search(r"<conversation>\n(.*)\n</conversation>", prompt, flags=re.DOTALL)
    lines = (found.group(1) if found else prompt).splitlines()
    words: list[str] = []
    for line in lines:
        words.extend(line.split()[:10])
        if len(words) >= STANDIN_SUMMARY_WORDS:
            break
    return f"[stand-in summary of {len(lines)} lines] " + " ".join(words[:STANDIN_SUMMARY_WORDS])


def standin_summariser(window: int) -> ScriptedModel:
    """The summary model of the explorer: no model call, a fixed-size digest, the given window."""
    # ScriptedModel calls a callable default_reply like any script entry (_next_message), but its
    # parameter is typed str | Message | None; widen it to ScriptEntry there and drop this ignore.
    return ScriptedModel(info=ModelInfo("stand-in summariser", window),
                         default_reply=_standin_reply)  # type: ignore[arg-type]


class _SessionSummaries:
    """The two SessionService methods a SummaryWorker uses, kept on the Session object itself."""

    async def get_summary(self, session: Session, filter_key: str = FULL_SESSION_KEY) -> Summary | None:
        return session.summaries.get(filter_key)

    async def write_summary(self, session: Session, filter_key: str, summary: Summary) -> None:
        session.summaries[filter_key] = summary


@dataclass(frozen=True)
class SummaryState:
    """Where the rolling summary stands when the next question arrives."""

    summary: Summary | None
    updates: int
    #: Ledger position of the boundary's last covered event (-1 = no summary).
    boundary_position: int


async def simulate_summary(ledger: Ledger, policy: SummaryPolicy | None, window: int) -> SummaryState:
    """The summary in force after the ledger, replayed as a runner would append it.

    The summary worker runs after every event that may trigger it (the runner's rule).
    """
    if policy is None:
        return SummaryState(None, 0, -1)
    session = Session(APP, USER, SESSION)
    worker = SummaryWorker(_SessionSummaries(), Summarizer(standin_summariser(window), policy), policy)  # type: ignore[arg-type]
    for event in ledger.events:
        session.events.append(event)
        if SummaryWorker.qualifies(session, event):
            await worker.summarize(session, FULL_SESSION_KEY, context_window=window, idle_seconds=0.0)
    summary = session.summaries.get(FULL_SESSION_KEY)
    position = -1
    if summary is not None and summary.boundary is not None:
        position = session.event_index(summary.boundary.last_event_id)
    return SummaryState(summary, worker.stats.advanced, position)


# ============================================================================ the projection


@dataclass(frozen=True)
class Projection:
    """Token counts of the next request, stage by stage, for one policy."""

    stages: dict[str, int]
    window: int
    sync_threshold: int
    summary_updates: int
    summary_boundary: int
    summary_tokens: int
    raw_events_in_request: int
    compacted: dict[str, int] = field(default_factory=dict)
    sync_summary: bool = False

    @property
    def sent(self) -> int:
        """Tokens of the request as sent (the last stage)."""
        return self.stages["sent"]


def _request_tokens(request: ModelRequest) -> int:
    return tokens.count_messages(request.messages, request.tools or None)


async def project(ledger: Ledger, choice: PolicyChoice, window: int, state: SummaryState | None = None) -> Projection:
    """The next request under ``choice``, counted after each mechanism (see :data:`STAGES`)."""
    summary_policy = choice.summary_policy()
    if state is None:
        state = await simulate_summary(ledger, summary_policy if choice.background_summary else None, window)
    recall = choice.recall_policy()
    compaction = choice.compaction_policy()
    model = standin_summariser(window)

    def agent(summary: SummaryPolicy | None, compact: CompactionPolicy | None) -> LLMAgent:
        return LLMAgent("explorer", model, instruction=INSTRUCTION, summary=summary, compaction=compact, recall=recall)

    session = Session(APP, USER, SESSION, events=list(ledger.events),
                      summaries={FULL_SESSION_KEY: state.summary} if state.summary is not None else {})
    full = agent(summary_policy, compaction)
    inv = Invocation(app_name=APP, user_id=USER, session=session, session_service=_SessionSummaries(),  # type: ignore[arg-type]
                     agent=full, message=Message.user(ledger.question), options=RunOptions(context_window=window))
    question = Event(author="user", choices=[Message.user(ledger.question)], object=OBJ_USER, id="ev-question",
                     invocation_id=inv.id, request_id=inv.request_id,
                     timestamp=(ledger.events[-1].timestamp + 1) if ledger.events else 0.0)
    question.token_count = tokens.count_event(question)
    session.events.append(question)
    inv.user_event = question

    async def tokens_with(stage_agent: LLMAgent) -> int:
        # Processors read the invocation's agent (its instruction, which processors run), so the
        # invocation must name the agent whose projection is being counted.
        inv.agent = stage_agent
        return _request_tokens((await stage_agent.build_draft(inv)).to_model_request())

    history = await tokens_with(agent(None, None))
    summarised = await tokens_with(agent(summary_policy, None))
    inv.agent = full
    draft = await full.build_draft(inv)
    request = draft.to_model_request()
    saved = {"pass0": 0, "pass1": 0, "pass2": 0}
    counts = {"pass0": 0, "pass1": 0, "pass2": 0}
    originals = {e.id: e for e in ledger.events}
    for e in draft.events:
        mark = e.metadata.get("compacted")
        if mark in saved and e.id in originals:
            saved[mark] += tokens.count_event(originals[e.id]) - tokens.count_event(e)
            counts[mark] += 1
    after_pass2 = _request_tokens(request)
    after_pass1 = after_pass2 + saved["pass2"]
    after_pass0 = after_pass1 + saved["pass1"]

    sync = False
    sent = after_pass2
    if compaction.enabled:
        if summary_policy is not None:
            inv.summary_worker = SummaryWorker(_SessionSummaries(), Summarizer(model, summary_policy),  # type: ignore[arg-type]
                                               summary_policy)
        final, _ = await relieve_context_pressure(full, inv, request, draft, allow_tools=True)
        sent = _request_tokens(final)
        sync = final is not request
    return Projection(
        stages={"history": history, "summary": summarised, "pass 0": after_pass0, "pass 1": after_pass1,
                "pass 2": after_pass2, "sent": sent},
        window=window,
        sync_threshold=compaction.sync_threshold(window),
        summary_updates=state.updates,
        summary_boundary=state.boundary_position,
        summary_tokens=tokens.count_text(state.summary.text) if state.summary is not None else 0,
        raw_events_in_request=sum(1 for e in draft.events if not e.metadata.get("compacted")),
        compacted=counts,
        sync_summary=sync,
    )


# ============================================================================== the widgets


DEFAULT_POLICIES: dict[str, PolicyChoice] = {
    # A: compaction only: reference defaults plus pass 2 at the recommended 8,192 (no summary).
    "A": PolicyChoice(compaction=True, keep_recent_requests=1, tool_result_max_tokens=1024,
                      oversized_tool_result_max_tokens=8192),
    # B: a rolling summary at half the window plus compaction with pass 2 at the recommended 8,192.
    "B": PolicyChoice(summary_context_ratio=0.5, compaction=True, keep_recent_requests=1,
                      tool_result_max_tokens=1024, oversized_tool_result_max_tokens=8192),
}
WINDOWS = (4096, 8192, 16384, 32768, 65536, 131072)


class Explorer:
    """Two policies over one ledger, each with its own controls; every change redraws both.

    ``controls[name][field]`` are the widgets of policy ``name`` (fields of :class:`PolicyChoice`);
    ``window`` is the shared context-window control. :meth:`refresh` is the observer callback:
    it recomputes the projections (summary simulations are cached per summary setting) and
    redraws the table (:attr:`table`, an HTML widget) and the plot (:attr:`plot`, an Output).
    :attr:`results` holds the numbers last shown.
    """

    def __init__(self, ledger: Ledger, *, window: int = 8192,
                 policies: dict[str, PolicyChoice] | None = None, draw: bool = True,
                 recipe_benchmark: str | None = None, recipe_mode: str | None = None) -> None:
        import ipywidgets as w

        self.ledger = ledger
        #: The benchmark and arm :meth:`recipe` writes the run command for (``None``: chosen per policy, :func:`run_recipe`).
        self.recipe_benchmark, self.recipe_mode = recipe_benchmark, recipe_mode
        self.draw = draw
        self.results: dict[str, Projection] = {}
        self.refreshes = 0
        self._summary_cache: dict[tuple[Any, int], SummaryState] = {}
        style = {"description_width": "190px"}
        layout = w.Layout(width="440px")
        self.window = w.Dropdown(options=list(WINDOWS), value=window, description="context window (tokens)",
                                 style=style, layout=layout)
        self.controls: dict[str, dict[str, Any]] = {}
        for name, choice in (policies or DEFAULT_POLICIES).items():
            self.controls[name] = {
                "summary_events_over": w.IntSlider(choice.summary_events_over, min=0, max=400, step=5,
                                                   description="summary: events_over", style=style, layout=layout),
                "summary_tokens_over": w.IntSlider(choice.summary_tokens_over, min=0, max=32000, step=500,
                                                   description="summary: tokens_over", style=style, layout=layout),
                "summary_context_ratio": w.FloatSlider(choice.summary_context_ratio, min=0.0, max=1.0, step=0.05,
                                                       description="summary: context_ratio", style=style,
                                                       layout=layout),
                "background_summary": w.Checkbox(choice.background_summary,
                                                 description="summary worker ran in the background", style=style,
                                                 layout=layout),
                "compaction": w.Checkbox(choice.compaction, description="compaction enabled", style=style,
                                         layout=layout),
                "keep_recent_requests": w.IntSlider(choice.keep_recent_requests, min=0, max=10,
                                                    description="keep_recent_requests", style=style, layout=layout),
                "tool_result_max_tokens": w.IntSlider(choice.tool_result_max_tokens, min=0, max=12000, step=64,
                                                      description="pass 1: tool_result_max_tokens", style=style,
                                                      layout=layout),
                "oversized_tool_result_max_tokens": w.IntSlider(
                    choice.oversized_tool_result_max_tokens, min=0, max=16384, step=256,
                    description="pass 2: oversized (0 = off)", style=style, layout=layout),
                "recall_tools": w.Dropdown(options=list(RECALL_CHOICES), value=choice.recall_tools,
                                           description="recall tools", style=style, layout=layout),
            }
        self.table = w.HTML()
        self.recipes = w.HTML()
        self.plot = w.Output()
        self.window.observe(self.refresh, names="value")
        for controls in self.controls.values():
            for control in controls.values():
                control.observe(self.refresh, names="value")
        self.refresh()

    # -- reading the controls ---------------------------------------------------------------

    def choice(self, name: str) -> PolicyChoice:
        """The policy ``name``'s controls currently describe."""
        return PolicyChoice(**{field: control.value for field, control in self.controls[name].items()})

    def _state(self, choice: PolicyChoice, window: int) -> SummaryState:
        policy = choice.summary_policy() if choice.background_summary else None
        key = (policy, window)
        if key not in self._summary_cache:
            self._summary_cache[key] = run_sync(simulate_summary(self.ledger, policy, window))
        return self._summary_cache[key]

    # -- the callback -----------------------------------------------------------------------

    def refresh(self, change: Any = None) -> None:
        """Recompute both projections and redraw (the observer of every control)."""
        window = int(self.window.value)
        results = {}
        for name in self.controls:
            choice = self.choice(name)
            results[name] = run_sync(project(self.ledger, choice, window, self._state(choice, window)))
        self.results = results
        self.refreshes += 1
        self.table.value = self.table_frame().to_html(index=False)
        self.recipes.value = "".join(
            f"<b>Policy {name} as a variant run</b><pre>{html.escape(self.recipe(name).describe())}</pre>"
            for name in self.controls)
        if self.draw:
            import matplotlib.pyplot as plt
            from IPython.display import display

            self.plot.clear_output(wait=True)
            with self.plot:
                fig = self.figure()
                display(fig)
                plt.close(fig)

    # -- views ------------------------------------------------------------------------------

    def table_frame(self) -> pd.DataFrame:
        """Stages as rows, one token column per policy, plus what each stage means."""
        rows = []
        for stage in STAGES:
            row: dict[str, Any] = {"stage": stage}
            for name, p in self.results.items():
                row[f"policy {name} tokens"] = p.stages[stage]
            row["what happens"] = STAGE_NOTES[stage]
            rows.append(row)
        facts = {
            "summary updates": lambda p: p.summary_updates,
            "summary boundary (ledger position)": lambda p: p.summary_boundary,
            "summary tokens": lambda p: p.summary_tokens,
            "tool results compacted (pass 0/1/2)": lambda p: "/".join(str(p.compacted[k]) for k in ("pass0", "pass1", "pass2")),
            "synchronous summary before sending": lambda p: "yes" if p.sync_summary else "no",
            "fits the window": lambda p: "yes" if p.sent <= p.window else "NO",
        }
        for label, fact in facts.items():
            row = {"stage": label}
            for name, p in self.results.items():
                row[f"policy {name} tokens"] = fact(p)
            row["what happens"] = ""
            rows.append(row)
        return pd.DataFrame(rows)

    def figure(self) -> Figure:
        """Grouped bars: tokens of the request per stage, one colour per policy; window lines."""
        import matplotlib.pyplot as plt
        import numpy as np

        fig, ax = plt.subplots(figsize=(10, 3.8))
        names = list(self.results)
        x = np.arange(len(STAGES))
        width = 0.8 / max(1, len(names))
        colours = ["#4c72b0", "#dd8452", "#55a868", "#8172b3"]
        for i, name in enumerate(names):
            values = [self.results[name].stages[s] for s in STAGES]
            bars = ax.bar(x + (i - (len(names) - 1) / 2) * width, values, width, label=f"policy {name}",
                          color=colours[i % len(colours)])
            for bar, value in zip(bars, values, strict=True):
                ax.annotate(f"{value:,}", (bar.get_x() + bar.get_width() / 2, value), textcoords="offset points",
                            xytext=(0, 2), ha="center", fontsize=7)
        first = next(iter(self.results.values()))
        ax.axhline(first.window, color="#c44e52", linestyle="-", linewidth=1.2, label=f"window {first.window:,}")
        ax.axhline(first.sync_threshold, color="#c44e52", linestyle=":", linewidth=1.2,
                   label=f"sync-summary threshold {first.sync_threshold:,}")
        ax.set_yscale("log")
        ax.set_xticks(x, STAGES)
        ax.set_ylabel("request tokens (log)")
        ax.set_title("Tokens of the next request after each mechanism")
        ax.legend(fontsize=8, loc="upper right")
        fig.tight_layout()
        return fig

    def recipe(self, name: str, benchmark: str | None = None, mode: str | None = None) -> RunRecipe:
        """Policy ``name``'s current controls as the command that runs it as a variant."""
        return run_recipe(self.choice(name), benchmark or self.recipe_benchmark, mode or self.recipe_mode)

    def widget(self) -> Any:
        """The whole explorer: the window control, the two control columns, the table and the plot."""
        import ipywidgets as w

        columns = []
        for name, controls in self.controls.items():
            columns.append(w.VBox([w.HTML(f"<b>Policy {name}</b>"), *controls.values()]))
        return w.VBox([w.HTML(f"<small>{self.ledger.describe()}</small>"), self.window, w.HBox(columns), self.plot,
                       self.table, self.recipes])

    def set(self, name: str, **values: Any) -> None:
        """Set controls of policy ``name`` by field name (each set fires :meth:`refresh`)."""
        for field_name, value in values.items():
            self.controls[name][field_name].value = value


def compare(ledger: Ledger, choices: dict[str, PolicyChoice], window: int = 8192) -> pd.DataFrame:
    """Token counts per stage for several policies, without widgets (one row per policy)."""
    rows = []
    for name, choice in choices.items():
        p = run_sync(project(ledger, choice, window))
        rows.append({"policy": name, **p.stages, "sync_summary": p.sync_summary,
                     "compacted (pass0/1/2)": "/".join(str(p.compacted[k]) for k in ("pass0", "pass1", "pass2"))})
    return pd.DataFrame(rows)


__all__ = [
    "DEFAULT_POLICIES",
    "Explorer",
    "Ledger",
    "PolicyChoice",
    "Projection",
    "RunRecipe",
    "STAGES",
    "SummaryState",
    "compare",
    "ledger_from_locomo",
    "ledger_from_turns",
    "project",
    "run_recipe",
    "simulate_summary",
    "standin_summariser",
]
