"""SWE-agent's LLM summary as "The Complexity Trap" runs it: every ``n`` turns become one checkpoint.

Source: ``JetBrains-Research/the-complexity-trap`` (a fork of SWE-agent; read in its fork
``Recursive-Safeguarding/the-complexity-trap`` @ ``adfaa1a18b8b3500abb7537101b2bdcefa31f22a``),
``sweagent/agent/history_processors.py``, class ``SummarizeEveryNTurns`` (config type
``summarize_every_n_turns``), and ``sweagent/agent/models.py``, ``query_for_summary`` /
``_construct_user_prompt_for_summary``. Lindenbauer et al., "The Complexity Trap: Simple Observation
Masking Is as Efficient as LLM Summarization for Agent Context Management" (arXiv 2508.21433,
sections "LLM-Summary" and "Experimental Configuration") run it with ``n = 21`` turns summarised at once and the last ``M = 10``
turns kept (config ``default_no_demo_checkpoint_same_model_openhands_N=21_M=10.yaml``, static
checkpointing); those are the defaults here (the source class's are ``n = 2``, ``keep_last_m_turns
= 0``), as ``swe_agent_masking``'s ``n = 10`` is the paper's.

What it does, per model call:

* A *turn* is an action and its observation: an assistant message with tool calls and the results
  that answer them. The system prompt and the task (the messages before the first turn) are never
  summarised.
* With ``t_done`` turns already summarised, when the turns after them reach ``n + m`` (``m`` =
  ``keep_last_m_turns``), the first ``n`` of them are sent to the summariser with the previous
  checkpoint (or, the first time, the task) as context; ``t_done`` grows by ``n``. So every
  checkpoint covers exactly ``n`` new turns and the request never holds more than ``n + m - 1``
  turns after the checkpoint.
* The request is the task, the latest checkpoint (an assistant message ``Checkpoint for the last
  <n> turns:``, a newline, then the summary: the source's wrapper), then the turns after
  ``t_done``. Before the first checkpoint the request is unchanged.
* The summariser sees a system prompt (:data:`SUMMARY_PROMPT`) and one user message: the context
  in ``<PREVIOUS_CHECKPOINT>`` or ``<PROBLEM_STATEMENT>`` tags, each turn as ``<TURN-i>`` with one
  ``ROLE: content`` line per message (and ``ACTION:`` lines for the calls), then
  :data:`SUMMARY_REQUEST`.

Departures from the source, and why:

* Static checkpointing as the paper defines it (one checkpoint, replaced by the next): the source
  at that commit shows every earlier checkpoint again on the calls between two summaries.
* A turn here holds every result of its calls and any message before the next action (a user
  message, a reply without a call); the source pairs each tool result with the message just
  before it and drops messages outside turns. On SWE-agent's histories (one call, one
  observation) the two agree; on a conversational history (tau-bench) nothing is dropped.
* :data:`SUMMARY_PROMPT` and :data:`SUMMARY_REQUEST` are our paraphrases of the source's
  OpenHands-style ``summary_system_template`` and its closing instruction.
* The source's API-call limit (a placeholder checkpoint once the instance's calls are spent) is
  not reproduced.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from agentlab.core.mechanism import RequestDraft, Stage
from agentlab.events import Message
from agentlab.policies._base import PEER_SUMMARY, Outcome, PeerMechanism
from agentlab.policy_json import PolicyJSON

if TYPE_CHECKING:
    from agentlab.core.invocation import Invocation

#: The paper's turns per checkpoint.
DEFAULT_N = 21
#: The paper's turns kept verbatim.
DEFAULT_M = 10
#: The checkpoint message's wrapper, verbatim.
CHECKPOINT = "Checkpoint for the last {n} turns:\n{summary}"
#: Our paraphrase of the source's summary system prompt (the OpenHands state-summary sections).
SUMMARY_PROMPT = """You keep a running state summary for an agent that works on a task step by step. You get the \
previous summary (or the task) and the agent's latest turns. Write the new summary with these parts, each short:
USER_CONTEXT: what the task asks for, with its requirements.
COMPLETED: what has been done so far, with results.
PENDING: what remains to be done.
CURRENT_STATE: the state the work is in now.
For code: CODE_STATE (file paths, functions, data structures), TESTS (failing cases, errors, outputs), \
CHANGES (edits made), DEPS (dependencies touched), VERSION_CONTROL_STATUS (branch, commits).
Track what matters for this task and skip what does not."""
#: Our paraphrase of the source's closing instruction to the summariser.
SUMMARY_REQUEST = "Now write the summary of the turns above, following the instructions given at the start."


@dataclass(frozen=True)
class SweAgentSummaryPolicy(PolicyJSON):
    """``SummarizeEveryNTurns``' fields at the paper's setting (``n = 21``, ``keep_last_m_turns = 10``)."""

    #: Turns summarised into each checkpoint (paper: 21).
    n: int = DEFAULT_N
    #: Latest turns kept verbatim (paper: 10).
    keep_last_m_turns: int = DEFAULT_M

    def __post_init__(self) -> None:
        if self.n <= 0:
            raise ValueError("SweAgentSummaryPolicy.n must be a positive integer")
        if self.keep_last_m_turns < 0:
            raise ValueError("SweAgentSummaryPolicy.keep_last_m_turns must be non-negative")


def split_turns(messages: Sequence[Message]) -> tuple[list[int], list[list[int]]]:
    """(indices of the messages before the first action, indices of each turn): a turn opens at an action."""
    prefix: list[int] = []
    turns: list[list[int]] = []
    for i, m in enumerate(messages):
        if m.role == "assistant" and m.tool_calls:
            turns.append([i])
        elif turns:
            turns[-1].append(i)
        else:
            prefix.append(i)
    return prefix, turns


def summary_input(context: str, turns: Sequence[Sequence[Message]]) -> list[Message]:
    """The summariser's prompt: the system prompt, then the context and the turns in one user message."""
    parts = [context]
    for i, turn in enumerate(turns):
        lines = [f"\n<TURN-{i}>"]
        for m in turn:
            lines.append(f"{m.role.upper()}: {m.content}")
            lines += [f"ACTION: {c.name} {c.arguments}" for c in m.tool_calls]
        lines.append(f"</TURN-{i}>")
        parts.append("\n".join(lines))
    parts.append(SUMMARY_REQUEST)
    return [Message.system(SUMMARY_PROMPT), Message.user("\n".join(parts))]


@dataclass
class _State:
    """What one session view has summarised: the turns covered and the latest checkpoint."""

    done: int = 0
    checkpoint: str | None = None


class SweAgentSummary(PeerMechanism):
    """``SummarizeEveryNTurns`` before the compaction stage; the turns covered and the checkpoint carry over."""

    policy_name: ClassVar[str] = "swe_agent_summary"
    policy_class: ClassVar[type[Any]] = SweAgentSummaryPolicy
    source: ClassVar[str] = ("JetBrains-Research/the-complexity-trap (fork @ adfaa1a1) sweagent/agent/"
                             "history_processors.py SummarizeEveryNTurns (n = 21, keep_last_m_turns = 10)")
    needs_model: ClassVar[str] = "SummarizeEveryNTurns folds every 21 turns into a model-written checkpoint"
    stage: ClassVar[Stage] = PEER_SUMMARY
    policy: SweAgentSummaryPolicy

    def __init__(self, policy: Any = None, **kwargs: Any) -> None:
        super().__init__(policy, **kwargs)
        self._states: dict[tuple[str, str], _State] = {}

    async def decide(self, inv: Invocation, messages: list[Message], draft: RequestDraft) -> Outcome:
        """Fold the oldest ``n`` unsummarised turns into a new checkpoint once ``n + m`` are waiting."""
        prefix, turns = split_turns(messages)
        state = self._states.setdefault(self.key(inv), _State())
        n, m = self.policy.n, self.policy.keep_last_m_turns
        fired = False
        if len(turns) - state.done >= n + m:
            task = next((messages[i].content for i in prefix if messages[i].role == "user"), "")
            context = (f"<PREVIOUS_CHECKPOINT>\n{state.checkpoint}\n</PREVIOUS_CHECKPOINT>"
                       if state.checkpoint is not None else f"<PROBLEM_STATEMENT>\n{task}\n</PROBLEM_STATEMENT>")
            todo = [[messages[i] for i in turn] for turn in turns[state.done:state.done + n]]
            text = await self.summarizer_for(inv)(summary_input(context, todo))
            state.checkpoint, state.done, fired = CHECKPOINT.format(n=n, summary=text), state.done + n, True
        if state.checkpoint is None:
            return Outcome.unchanged(messages)
        kept = [i for turn in turns[state.done:] for i in turn]
        return Outcome((*(messages[i] for i in prefix), Message.assistant(state.checkpoint),
                        *(messages[i] for i in kept)), (*prefix, None, *kept), fired=fired)


__all__ = ["CHECKPOINT", "SUMMARY_PROMPT", "SweAgentSummary", "SweAgentSummaryPolicy", "split_turns",
           "summary_input"]
