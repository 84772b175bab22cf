"""The pieces of ``notebooks/01_runtime_tour.ipynb``: agents that show what the runtime does, and pictures of it.

A diagnostic agent runs the tool calls the caller names (the embedded model cannot emit tool
calls), an LLM agent keeps every request it projected, and tables and a plot set the event ledger
(history) against what one request carried (context).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

import pandas as pd

from agentlab.events import OBJ_TOOL_RESPONSE, Event, Message, ToolCall
from agentlab.model import tokens
from agentlab.model.base import ModelRequest
from agentlab.runtime import FunctionTool, Invocation, LLMAgent, RequestDraft, ToolContext

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from agentlab.session.base import Session, Summary


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
        """Project the request as :class:`LLMAgent` does, and keep it with its draft."""
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
        """The listed diagnostic calls and their results as events, then the LLM agent's turn."""
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
    """A model request as a table: one row per message with its tokens.

    With the draft, each row also names the ledger event it came from and whether compaction
    replaced its content.
    """
    by_content: dict[tuple[str, str], Event] = {}  # the draft's history events by what they put in the request
    for e in draft.events if draft is not None else []:
        if e.message is not None and e.message.role != "system":
            by_content[(e.message.role, e.message.content)] = e
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
                             request: ModelRequest | None = None, *, model: str | None = None) -> Figure:
    """Two rows over the ledger's event positions: the tokens each event holds in the history,
    and the tokens it took in one request (absent, whole, or replaced by a placeholder).
    ``model``: the spec that answered, named above the rows (the smoke-test label for the embedded model).

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
    if model is not None:
        from agentlab.notebooks.provenance import model_label

        fig.suptitle(model_label(model), fontsize=10)
    fig.tight_layout()
    return fig
