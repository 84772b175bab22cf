"""Real tool-using agent trajectories (tau-bench airline, SWE-agent) as agentlab event ledgers.

Files (pinned in ``data/manifest.toml`` under ``[agent_trajectories]``, found through
:mod:`agentlab.bench.datasets.base`):

* ``tau_bench/gpt-4o-airline.json`` — ``sierra-research/tau-bench`` @ ``59a200c6``,
  ``historical_trajectories/gpt-4o-airline.json``: 200 entries ``{task_id, reward, info, traj,
  trial}``; ``traj`` is the OpenAI-style message list gpt-4o saw and wrote as the airline agent.
* ``swe_agent/*.traj`` — ``SWE-agent/SWE-agent`` @ ``3ea751c0``, its 22 ``.traj`` files; each has a
  ``history``: the messages the model saw (system prompt, demonstrations, the issue, actions,
  observations).

How a trajectory becomes a ledger, as the agent saw it:

* The system prompt (tau-bench's policy; SWE-agent's ``system`` message) is the ``instruction``,
  not an event. SWE-agent's demonstrations (``is_demo`` user messages) are appended to it: they are
  part of every request and SWE-agent never elides them.
* tau-bench: each ``user`` message is a user event that opens a request unit; ``assistant``
  messages become assistant events with their tool calls; ``tool`` messages become tool results.
* SWE-agent, two formats. With ``tool_calls`` on the actions (function-calling configs) the calls
  and the ``tool`` observations are taken as they are. Without (the thought-action configs) an
  action is an assistant event whose one tool call is named after the command's first word with
  arguments ``{"command": <action>}``, and the next ``user`` message (the observation) is its tool
  result. The first non-demo user message is the issue: the one user event.

Ids are derived from the trajectory id and the position, so the same file always gives the same
ledger. A malformed file raises :class:`~agentlab.bench.datasets.base.DatasetError` naming it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentlab.bench.datasets.base import DatasetError, dataset_spec, read_json, resolve_files
from agentlab.events import OBJ_TOOL_RESPONSE, OBJ_USER, Event, Message, ToolCall
from agentlab.model import tokens

NAME = "agent_trajectories"
TAU_FILE = "tau_bench/gpt-4o-airline.json"
SWE_PREFIX = "swe_agent/"
DATASETS: tuple[str, ...] = ("tau_bench", "swe_agent")
#: Timestamps of the replayed ledger: a fixed epoch, one second apart (the recordings carry none).
EPOCH = 1_700_000_000.0
AGENT = "agent"


@dataclass(frozen=True)
class Trajectory:
    """One recorded trajectory as an agentlab ledger."""

    #: ``tau_bench/<task_id>-<trial>`` or ``swe_agent/<file stem>``.
    traj_id: str
    #: ``tau_bench`` or ``swe_agent``.
    dataset: str
    #: The system prompt (and SWE-agent's demonstrations): the request's instruction.
    instruction: str
    events: tuple[Event, ...]
    #: The recording's reward (tau-bench: 1.0 solved; SWE-agent: none recorded); not a prediction.
    reward: float | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TrajectoryData:
    """The trajectories loaded, with one fingerprint over the files read."""

    trajectories: tuple[Trajectory, ...]
    sha256: str


class _Builder:
    """Appends events with deterministic ids, request units and timestamps."""

    def __init__(self, traj_id: str) -> None:
        self.traj_id = traj_id
        self.events: list[Event] = []
        self.unit = f"{traj_id}-u0"
        self.users = 0

    def _add(self, event: Event) -> None:
        event.token_count = tokens.count_event(event)
        self.events.append(event)

    def _event(self, author: str, message: Message, obj: str) -> Event:
        n = len(self.events)
        return Event(author=author, choices=[message], object=obj, id=f"{self.traj_id}-e{n:04d}",
                     invocation_id=self.unit, request_id=self.unit, timestamp=EPOCH + n)

    def user(self, text: str) -> None:
        self.unit = f"{self.traj_id}-u{self.users}"
        self.users += 1
        self._add(self._event("user", Message.user(text), OBJ_USER))

    def assistant(self, text: str, calls: Sequence[ToolCall]) -> None:
        self._add(self._event(AGENT, Message.assistant(text, tuple(calls)), "chat.completion"))

    def tool(self, call_id: str, name: str, text: str) -> None:
        self._add(self._event(AGENT, Message.tool(call_id, name, text), OBJ_TOOL_RESPONSE))


def _text(message: Any, where: str) -> str:
    if not isinstance(message, dict):
        raise DatasetError(f"{where}: expected a message object, got {type(message).__name__}")
    content = message.get("content")
    if content is None:
        return ""
    if isinstance(content, list):  # OpenAI content parts: keep the text parts
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
    if not isinstance(content, str):
        raise DatasetError(f"{where}: field 'content' should be a string, got {type(content).__name__}")
    return content


def _openai_calls(raw: Any, where: str) -> list[ToolCall]:
    if not raw:
        return []
    if not isinstance(raw, list):
        raise DatasetError(f"{where}: field 'tool_calls' should be a list, got {type(raw).__name__}")
    calls = []
    for j, call in enumerate(raw):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(call.get("id"), str) or not isinstance(fn.get("name"), str):
            raise DatasetError(f"{where}: tool call #{j + 1} lacks an id or a function name")
        calls.append(ToolCall(call["id"], fn["name"], str(fn.get("arguments") or "{}")))
    return calls


# -------------------------------------------------------------------------------- tau-bench


def parse_tau_entry(entry: Any, where: str) -> Trajectory:
    """One tau-bench entry (``{task_id, reward, info, traj, trial}``) as a :class:`Trajectory`."""
    if not isinstance(entry, dict):
        raise DatasetError(f"{where}: expected an object, got {type(entry).__name__}")
    for key in ("task_id", "traj"):
        if key not in entry:
            raise DatasetError(f"{where}: missing field {key!r}")
    traj = entry["traj"]
    if not isinstance(traj, list) or not traj:
        raise DatasetError(f"{where}: field 'traj' should be a non-empty list of messages")
    traj_id = f"tau_bench/{entry['task_id']}-{entry.get('trial', 0)}"
    b = _Builder(traj_id)
    instruction = ""
    for i, message in enumerate(traj):
        at = f"{where} message {i + 1}"
        text = _text(message, at)
        role = message.get("role")
        if role == "system":
            instruction = f"{instruction}\n\n{text}" if instruction else text
        elif role == "user":
            b.user(text)
        elif role == "assistant":
            b.assistant(text, _openai_calls(message.get("tool_calls"), at))
        elif role == "tool":
            call_id, name = message.get("tool_call_id"), message.get("name")
            if not isinstance(call_id, str):
                raise DatasetError(f"{at}: a tool message lacks 'tool_call_id'")
            b.tool(call_id, str(name or "tool"), text)
        else:
            raise DatasetError(f"{at}: unknown role {role!r}")
    reward = entry.get("reward")
    if reward is not None and not isinstance(reward, (int, float)):
        raise DatasetError(f"{where}: field 'reward' should be a number, got {type(reward).__name__}")
    return Trajectory(traj_id, "tau_bench", instruction, tuple(b.events),
                      None if reward is None else float(reward),
                      {"task_id": entry["task_id"], "trial": entry.get("trial", 0)})


def parse_tau_file(data: Any, path: str) -> list[Trajectory]:
    """Every entry of the tau-bench file."""
    if not isinstance(data, list):
        raise DatasetError(f"{path}: expected a JSON list of trajectories, got {type(data).__name__}")
    return [parse_tau_entry(entry, f"{path} entry {i + 1}") for i, entry in enumerate(data)]


# -------------------------------------------------------------------------------- SWE-agent


def _action_call(traj_id: str, step: int, action: str) -> ToolCall:
    command = action.strip()
    name = command.split(maxsplit=1)[0] if command else "action"
    return ToolCall(f"{traj_id}-call-{step:03d}", name, json.dumps({"command": command}))


def parse_swe_history(history: Any, traj_id: str, where: str) -> tuple[str, list[Event]]:
    """(instruction, ledger) of one SWE-agent ``history`` (see the module docstring)."""
    if not isinstance(history, list) or not history:
        raise DatasetError(f"{where}: field 'history' should be a non-empty list of messages")
    b = _Builder(traj_id)
    instruction_parts: list[str] = []
    names: dict[str, str] = {}
    pending: ToolCall | None = None  # the thought-action call awaiting its observation
    steps = 0
    for i, message in enumerate(history):
        at = f"{where} history message {i + 1}"
        text = _text(message, at)
        role = message.get("role")
        demo = str(message.get("is_demo", "")).lower() == "true" or message.get("is_demo") is True
        if role == "system" or (role == "user" and demo):
            instruction_parts.append(text)
        elif role == "assistant":
            calls = _openai_calls(message.get("tool_calls"), at)
            if not calls:
                steps += 1
                pending = _action_call(traj_id, steps, str(message.get("action") or ""))
                calls = [pending]
            names.update((c.id, c.name) for c in calls)
            b.assistant(text, calls)
        elif role == "tool":
            ids = message.get("tool_call_ids") or [message.get("tool_call_id")]
            call_id = ids[0] if isinstance(ids, list) and ids else None
            if not isinstance(call_id, str):
                raise DatasetError(f"{at}: a tool observation names no tool call")
            b.tool(call_id, names.get(call_id, "tool"), text)
        elif role == "user":
            if pending is not None:
                b.tool(pending.id, pending.name, text)
                pending = None
            elif not any(e.message is not None and e.message.role == "user" for e in b.events):
                b.user(text)
            else:
                raise DatasetError(f"{at}: a user message that is neither the issue nor an action's observation")
        else:
            raise DatasetError(f"{at}: unknown role {role!r}")
    return "\n\n".join(instruction_parts), b.events


def parse_swe_file(data: Any, path: str) -> Trajectory:
    """One SWE-agent ``.traj`` file as a :class:`Trajectory` (no reward: the files record none)."""
    if not isinstance(data, dict) or "history" not in data:
        raise DatasetError(f"{path}: expected a JSON object with a 'history' list")
    stem = os.path.basename(path).removesuffix(".traj")
    traj_id = f"swe_agent/{stem}"
    instruction, events = parse_swe_history(data["history"], traj_id, path)
    raw_info = data.get("info")
    info: dict[str, Any] = raw_info if isinstance(raw_info, dict) else {}
    return Trajectory(traj_id, "swe_agent", instruction, tuple(events), None,
                      {"exit_status": info.get("exit_status"), "file": stem})


# ---------------------------------------------------------------------------------- loading


def load_trajectories(datasets: Sequence[str] = DATASETS, *, manifest: str | os.PathLike[str] | None = None,
                      allow_download: bool | None = None) -> TrajectoryData:
    """Load (and verify) the trajectories of ``datasets`` (``tau_bench``, ``swe_agent``), in file order."""
    unknown = [d for d in datasets if d not in DATASETS]
    if unknown:
        raise DatasetError(f"unknown trajectory dataset(s) {', '.join(unknown)}; choose from {', '.join(DATASETS)}")
    spec = dataset_spec(NAME, manifest)
    paths: list[str] = []
    if "tau_bench" in datasets:
        paths.append(TAU_FILE)
    if "swe_agent" in datasets:
        paths += sorted(f.path for f in spec.files_under(SWE_PREFIX))
    resolved = resolve_files(NAME, paths, manifest=manifest, allow_download=allow_download)
    out: list[Trajectory] = []
    for f in resolved.files:
        data = read_json(f.local_path, f"{NAME}/{f.spec.path}")
        if f.spec.path == TAU_FILE:
            out += parse_tau_file(data, str(f.local_path))
        else:
            out.append(parse_swe_file(data, str(f.local_path)))
    return TrajectoryData(tuple(out), resolved.sha256)


__all__ = [
    "DATASETS",
    "NAME",
    "Trajectory",
    "TrajectoryData",
    "load_trajectories",
    "parse_swe_file",
    "parse_swe_history",
    "parse_tau_entry",
    "parse_tau_file",
]
