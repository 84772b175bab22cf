"""Claude Code session logs (JSONL) as agentlab event ledgers, as the model saw them.

Claude Code writes one JSON object a line to ``~/.claude/projects/<project>/<session>.jsonl``.
This loader turns one such file into one :class:`~agentlab.bench.datasets.trajectories.Trajectory`
per *thread* (the main conversation, each sub-agent, each stretch after a compaction):

* **One assistant response, one event.** A response is written as several ``assistant`` lines that
  share ``message.id``, one content block each (``thinking``, ``text``, ``tool_use``). They are
  merged, in the order written, into one assistant event at the position of the first line; its
  ``tool_use`` blocks become tool calls (arguments: the compact JSON of ``input``). The provider's
  ``usage`` of the response (``input_tokens``, ``cache_read_input_tokens``,
  ``cache_creation_input_tokens``, the largest ``output_tokens`` written: the streamed lines carry
  partial counts) is kept beside it, in ``event.metadata["usage"]`` (:class:`RecordedUsage`).
  ``metadata["time"]`` is when its first line was written. Claude Code's own ``<synthetic>`` assistant
  lines (an error shown in the terminal, never a model
  reply) are not messages; they are counted.
* **Thinking, by the provider's rule.** Anthropic's documentation (*Context windows*, "extended
  thinking" and "with tool use": https://docs.anthropic.com/en/docs/build-with-claude/context-windows)
  says thinking blocks of previous assistant turns are stripped from the context, while the
  thinking of the current turn — the assistant messages since the last user message that is not
  only tool results — must be sent back with the tool results and counts as input. A ledger is
  shared by every later step, so the rule is applied per turn: an assistant event's thinking text
  is part of its content when no genuine user message follows it in its thread (the last turn, the
  whole session for a one-prompt agent run), and left out otherwise (for the steps of an earlier
  turn, its own turn's thinking is then missing: ``metadata["thinking_dropped"]`` counts those
  responses). ``python -m agentlab.bench cache-check`` compares the reconstruction with the
  recorded usage.
* **Tool results.** Each ``tool_result`` block of a ``user`` line becomes a tool result event (its
  text parts joined; an image part is written ``[image]``), named after its call, with
  ``metadata["is_error"]`` as recorded. The text blocks of a user line are one user event, which
  opens a request unit.
* **Not messages:** ``summary`` (a session title, not a compaction), ``file-history-snapshot``,
  ``queue-operation`` and ``system`` lines. ``system`` ``api_error`` lines (a failed call Claude
  Code retried) are counted in ``metadata["api_errors"]``.
* **Compactions.** A ``system`` line of subtype ``compact_boundary`` ends the thread the model saw:
  after it, the model sees Claude Code's summary (the next ``user`` line, ``isCompactSummary``) and
  what follows. Each stretch after a boundary is its own trajectory ``<id>/compact-<n>``, the
  summary its first user event; ``metadata["compactions"]`` counts the boundaries of the file.
* **Sub-agents.** Lines with ``isSidechain`` true (a Task sub-agent's conversation, written inline
  or in an ``agent-*.jsonl`` file) are kept apart, one trajectory per ``agentId`` (``<id>/agent-<agentId>``).
* **Malformed lines.** A line that is not a JSON object (``0c18eb7c.jsonl`` line 5 of the pinned
  sessions is a truncated fragment) is skipped and named (file and line) in
  :attr:`ClaudeCodeData.skipped`; the rest of the file is kept. ``strict=True`` raises instead.

The system prompt and tool definitions Claude Code sent are not in the logs: ``instruction`` is
empty and the cache check estimates their size from the recorded usage.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentlab.bench.datasets.base import DatasetError, dataset_spec, resolve_files
from agentlab.bench.datasets.trajectories import EPOCH, NAME, Trajectory
from agentlab.events import OBJ_TOOL_RESPONSE, OBJ_USER, Event, Message, ToolCall
from agentlab.model import tokens

#: The dataset name (``[dataset] datasets``) and the folder of the pinned copies under ``agent_trajectories``.
DATASET = "claude_code"
PREFIX = "claude_code/"
#: The dataset name of a user's own logs (``--sessions-dir``).
USER_DATASET = "claude_code_user"
AGENT = "agent"
#: Line types that are not messages.
NOT_MESSAGES = frozenset({"summary", "file-history-snapshot", "queue-operation"})
_JSON = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), sort_keys=True)


@dataclass(frozen=True)
class RecordedUsage:
    """What the provider reported for one API response (tokens)."""

    input_tokens: int
    cache_read_input_tokens: int
    cache_creation_input_tokens: int
    output_tokens: int

    @property
    def prompt_tokens(self) -> int:
        """The whole prompt as the provider counted it: uncached input, cache read and cache write."""
        return self.input_tokens + self.cache_read_input_tokens + self.cache_creation_input_tokens


@dataclass(frozen=True)
class SkippedLine:
    """A line the loader could not read."""

    file: str
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.file} line {self.line}: {self.reason}"


@dataclass(frozen=True)
class ClaudeCodeData:
    """The threads of a set of log files, what was skipped, and one fingerprint."""

    trajectories: tuple[Trajectory, ...]
    sha256: str
    skipped: tuple[SkippedLine, ...] = ()
    api_errors: int = 0
    compactions: int = 0
    synthetic: int = 0
    files: int = 0
    #: ``pinned`` (the manifest's copies, sha256 checked) or ``user`` (a folder of the user's own logs).
    origin: str = "pinned"


def _usage(raw: Any) -> RecordedUsage | None:
    if not isinstance(raw, dict):
        return None

    def n(key: str) -> int:
        value = raw.get(key)
        return int(value) if isinstance(value, (int, float)) else 0

    return RecordedUsage(n("input_tokens"), n("cache_read_input_tokens"), n("cache_creation_input_tokens"),
                         n("output_tokens"))


def _time(raw: Any) -> float | None:
    if not isinstance(raw, str):
        return None
    from datetime import datetime

    try:
        return datetime.fromisoformat(raw.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                parts.append(str(part.get("text", "")))
            elif isinstance(part, dict) and part.get("type") == "image":
                parts.append("[image]")
        return "\n".join(parts)
    return "" if content is None else str(content)


@dataclass
class _Response:
    """An assistant response being assembled from its lines."""

    message_id: str
    thinking: list[str] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)
    usage: RecordedUsage | None = None
    line: int = 0
    #: When the response's first line was written (seconds since the epoch; ``None`` when the line has no time).
    time: float | None = None


@dataclass
class _Thread:
    """One thread's items in order: responses, user texts, tool results."""

    key: str
    items: list[Any] = field(default_factory=list)
    responses: dict[str, _Response] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)
    compacted_from: int = 0  # the compaction number this stretch follows (0: the start of the session)


def _thread_key(obj: dict[str, Any]) -> str:
    if obj.get("isSidechain") is True:
        return f"agent-{obj.get('agentId') or 'sidechain'}"
    return "main"


def _add_assistant(thread: _Thread, obj: dict[str, Any], lineno: int) -> bool:
    """Merge one assistant line; ``False`` for a ``<synthetic>`` line (not a model reply)."""
    message = obj.get("message")
    if not isinstance(message, dict):
        raise DatasetError(f"line {lineno}: an assistant line without a message object")
    if message.get("model") == "<synthetic>":
        return False
    mid = str(message.get("id") or obj.get("uuid") or f"line-{lineno}")
    response = thread.responses.get(mid)
    if response is None:
        response = thread.responses[mid] = _Response(mid, line=lineno, time=_time(obj.get("timestamp")))
        thread.items.append(response)
    content = message.get("content")
    blocks = content if isinstance(content, list) else [{"type": "text", "text": content or ""}]
    for block in blocks:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "thinking":
            response.thinking.append(str(block.get("thinking", "")))
        elif kind == "text":
            response.text.append(str(block.get("text", "")))
        elif kind == "tool_use":
            call = ToolCall(str(block.get("id")), str(block.get("name", "tool")), _JSON.encode(block.get("input", {})))
            response.calls.append(call)
            thread.names[call.id] = call.name
    usage = _usage(message.get("usage"))
    if usage is not None:
        previous = response.usage
        if previous is not None and previous.output_tokens > usage.output_tokens:
            usage = RecordedUsage(usage.input_tokens, usage.cache_read_input_tokens,
                                  usage.cache_creation_input_tokens, previous.output_tokens)
        response.usage = usage
    return True


def _add_user(thread: _Thread, obj: dict[str, Any], lineno: int) -> None:
    message = obj.get("message")
    if not isinstance(message, dict):
        raise DatasetError(f"line {lineno}: a user line without a message object")
    content = message.get("content")
    if isinstance(content, str):
        thread.items.append(("user", content, bool(obj.get("isCompactSummary"))))
        return
    texts = []
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "tool_result":
            call_id = str(block.get("tool_use_id"))
            thread.items.append(("tool", call_id, _result_text(block.get("content")), bool(block.get("is_error"))))
        elif block.get("type") == "text":
            texts.append(str(block.get("text", "")))
    if texts:
        thread.items.append(("user", "\n".join(texts), bool(obj.get("isCompactSummary"))))


def _build(traj_id: str, dataset: str, thread: _Thread, meta: dict[str, Any]) -> Trajectory | None:
    """The ledger of one thread (thinking kept for the responses after the last genuine user message)."""
    last_user = max((i for i, item in enumerate(thread.items) if isinstance(item, tuple) and item[0] == "user"),
                    default=-1)
    events: list[Event] = []
    unit = f"{traj_id}-u0"
    users = dropped = 0

    def add(author: str, message: Message, obj: str, metadata: dict[str, Any]) -> None:
        n = len(events)
        event = Event(author=author, choices=[message], object=obj, id=f"{traj_id}-e{n:04d}", invocation_id=unit,
                      request_id=unit, timestamp=EPOCH + n, metadata=metadata)
        event.token_count = tokens.count_event(event)
        events.append(event)

    for i, item in enumerate(thread.items):
        if isinstance(item, _Response):
            keep = i > last_user
            dropped += int(bool(item.thinking) and not keep)
            text = "\n\n".join([*(item.thinking if keep else []), *item.text])
            add(AGENT, Message.assistant(text, tuple(item.calls)), "chat.completion",
                {"usage": item.usage, "message_id": item.message_id, "line": item.line, "time": item.time,
                 "thinking_tokens": tokens.count_text("\n\n".join(item.thinking)) if keep else 0})
        elif item[0] == "user":
            unit = f"{traj_id}-u{users}"
            users += 1
            add("user", Message.user(item[1]), OBJ_USER, {"compact_summary": item[2]})
        else:
            _, call_id, text, is_error = item
            add(AGENT, Message.tool(call_id, thread.names.get(call_id, "tool"), text), OBJ_TOOL_RESPONSE,
                {"is_error": is_error})
    if not any(e.message is not None and e.message.role == "assistant" for e in events):
        return None
    return Trajectory(traj_id, dataset, "", tuple(events), None, {**meta, "thinking_dropped": dropped})


@dataclass
class _FileResult:
    trajectories: list[Trajectory]
    skipped: list[SkippedLine]
    api_errors: int = 0
    compactions: int = 0
    synthetic: int = 0


def parse_session_lines(lines: Iterable[str], name: str, *, dataset: str = DATASET,
                        strict: bool = False) -> _FileResult:
    """The threads of one log (``name`` is its file name: the trajectory ids are ``<dataset>/<stem>...``)."""
    stem = name.removesuffix(".jsonl")
    skipped: list[SkippedLine] = []
    threads: dict[str, _Thread] = {}
    finished: list[_Thread] = []
    api_errors = compactions = synthetic = 0
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            obj, reason = None, f"not valid JSON ({exc.msg} at column {exc.colno})"
        else:
            reason = f"expected a JSON object, got {type(obj).__name__}"
        if not isinstance(obj, dict):
            if strict:
                raise DatasetError(f"{name} line {lineno}: {reason} (--strict; without it the line is skipped)")
            skipped.append(SkippedLine(name, lineno, reason))
            continue
        kind = obj.get("type")
        if kind in NOT_MESSAGES:
            continue
        key = _thread_key(obj)
        if kind == "system":
            if obj.get("subtype") == "api_error":
                api_errors += 1
            elif obj.get("subtype") == "compact_boundary" and key in threads:
                compactions += 1
                finished.append(threads.pop(key))
                threads[key] = _Thread(key, compacted_from=compactions)
            elif obj.get("subtype") == "compact_boundary":
                compactions += 1
                threads[key] = _Thread(key, compacted_from=compactions)
            continue
        thread = threads.setdefault(key, _Thread(key))
        try:
            if kind == "assistant":
                synthetic += int(not _add_assistant(thread, obj, lineno))
            elif kind == "user":
                _add_user(thread, obj, lineno)
        except DatasetError as exc:
            if strict:
                raise DatasetError(f"{name} {exc}") from None
            skipped.append(SkippedLine(name, lineno, str(exc).split(": ", 1)[-1]))
    out = []
    for thread in [*finished, *threads.values()]:
        suffix = "" if thread.key == "main" else f"/{thread.key}"
        if thread.compacted_from:
            suffix += f"/compact-{thread.compacted_from}"
        built = _build(f"{dataset}/{stem}{suffix}", dataset, thread,
                       {"file": name, "thread": thread.key, "after_compaction": thread.compacted_from})
        if built is not None:
            out.append(built)
    return _FileResult(out, skipped, api_errors, compactions, synthetic)


def _collect(results: Sequence[_FileResult], sha256: str, origin: str) -> ClaudeCodeData:
    return ClaudeCodeData(tuple(t for r in results for t in r.trajectories), sha256,
                          tuple(s for r in results for s in r.skipped), sum(r.api_errors for r in results),
                          sum(r.compactions for r in results), sum(r.synthetic for r in results), len(results),
                          origin)


def _read(path: Path, name: str, dataset: str, strict: bool) -> _FileResult:
    try:
        with path.open("r", encoding="utf-8", errors="replace") as fh:
            return parse_session_lines(fh, name, dataset=dataset, strict=strict)
    except OSError as exc:
        raise DatasetError(f"cannot read {path}: {exc}") from None


def load_claude_code(*, manifest: str | os.PathLike[str] | None = None, allow_download: bool | None = None,
                     strict: bool = False, limit: int | None = None) -> ClaudeCodeData:
    """The pinned sessions (``claude_code/*.jsonl`` of ``[agent_trajectories]``), sha256 checked, in name order."""
    spec = dataset_spec(NAME, manifest)
    paths = sorted(f.path for f in spec.files_under(PREFIX))[:limit]
    resolved = resolve_files(NAME, paths, manifest=manifest, allow_download=allow_download)
    results = [_read(f.local_path, os.path.basename(f.spec.path), DATASET, strict) for f in resolved.files]
    return _collect(results, resolved.sha256, "pinned")


def pinned_fingerprint(manifest: str | os.PathLike[str] | None = None) -> tuple[str, int]:
    """(the fingerprint :func:`load_claude_code` gives all the pinned sessions, their number), from the manifest.

    The same value as the loaded selection's ``sha256`` (``path:sha256`` lines of every file), read
    from the pinned hashes without reading a session: a run over the first few files keeps the
    dataset's identity.
    """
    import hashlib

    files = dataset_spec(NAME, manifest).files_under(PREFIX)
    lines = sorted(f"{f.path}:{f.sha256 or 'unhashed'}" for f in files)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest(), len(files)


def load_sessions_dir(folder: str | os.PathLike[str], *, strict: bool = False) -> ClaudeCodeData:
    """Every ``*.jsonl`` under ``folder`` (a user's own Claude Code logs; no sha256 is asked), in path order."""
    import hashlib

    root = Path(folder).expanduser()
    if not root.is_dir():
        raise DatasetError(f"--sessions-dir {folder}: not a folder; point it at a folder of Claude Code logs "
                           "(e.g. ~/.claude/projects/<project>)")
    files = sorted(root.rglob("*.jsonl"))
    if not files:
        raise DatasetError(f"--sessions-dir {folder}: no *.jsonl file under it")
    digest = hashlib.sha256()
    results = []
    for path in files:
        rel = path.relative_to(root).as_posix()
        digest.update(f"{rel}:{path.stat().st_size}\n".encode())
        results.append(_read(path, rel.replace("/", "_"), USER_DATASET, strict))
    return _collect(results, digest.hexdigest(), "user")


__all__ = [
    "DATASET",
    "USER_DATASET",
    "ClaudeCodeData",
    "RecordedUsage",
    "SkippedLine",
    "load_claude_code",
    "load_sessions_dir",
    "parse_session_lines",
    "pinned_fingerprint",
]
