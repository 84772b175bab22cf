"""Prompt caching in retention (agentlab/bench/retention/cache.py) and the cache-stable clearing variant."""

from __future__ import annotations

import json

from agentlab.bench.datasets.qmsum import Meeting, TextSpan, TranscriptTurn
from agentlab.bench.retention.delivery import question_event
from agentlab.bench.retention.questions import Question, measure_retention, request_points, retention_arms
from agentlab.bench.tasks.qmsum_delivery import qmsum_tool_delivery, qmsum_tool_evidence
from agentlab.core import project
from agentlab.events import Message, ToolCall
from agentlab.model.base import ModelInfo
from agentlab.model.prompt_caching import cache_sequence, totals
from agentlab.policies import mechanism
from agentlab.policies.anthropic_clear_tool_uses import AnthropicClearToolUsesPolicy, clear_tool_uses
from agentlab.policies.arms import Arm
from agentlab.session.base import Session
from tests.bench.cli_helpers import run_cli
from tests.bench.test_retention import toy_case

TOOLS = [{"type": "function", "function": {"name": "read", "parameters": {"type": "object"}}}]


def reading_history(n: int) -> list[Message]:
    """A system prompt, a task, and ``n`` reads whose results are ~300 tokens each."""
    out = [Message.system("You read files and answer. " * 60), Message.user("Summarise the repository.")]
    for i in range(n):
        out.append(Message.assistant("", [ToolCall(f"c{i}", "read", json.dumps({"path": f"f{i}"}))]))
        out.append(Message.tool(f"c{i}", "read", f"line {i} of file {i} says something different " * 30))
    return out


def requests_under(policy: AnthropicClearToolUsesPolicy, n: int) -> list[tuple[list[Message], list[dict]]]:
    """The request before each read (and after the last) of a reading agent under ``policy``."""
    history = reading_history(n)
    points = [2 + 2 * i for i in range(n + 1)]  # before read i: the system, the task, i earlier reads
    return [(list(clear_tool_uses(history[:p], policy).messages), TOOLS) for p in points]


def test_stateless_clearing_busts_at_every_step_where_the_batch_variant_does_not() -> None:
    every = AnthropicClearToolUsesPolicy(trigger_type="tool_uses", trigger_value=3, keep=2)
    batched = AnthropicClearToolUsesPolicy(trigger_type="tool_uses", trigger_value=3, keep=2, clear_at_least=1500,
                                           clear_in_batches=True)
    n = 16
    plain = cache_sequence(requests_under(every, n), "openai")
    stable = cache_sequence(requests_under(batched, n), "openai")
    fired = [i for i in range(n + 1) if i > every.trigger_value]  # requests with more than 3 tool uses
    # Stateless clearing moves the cleared point by one read per request: every request over the trigger
    # rewrites a result the previous request sent (the first one clears results the cache held).
    assert [i for i, r in enumerate(plain) if r.bust] == fired
    busts = [i for i, r in enumerate(stable) if r.bust]
    # The batch variant clears ~1,500 tokens (five ~300-token results) at a time: it busts only when a batch
    # completes, and never where the plain variant does not.
    assert busts and set(busts) < set(fired)
    assert all(b - a >= 4 for a, b in zip(busts, busts[1:], strict=False))
    assert len(busts) <= len(fired) // 4
    assert totals(stable).cached_tokens > totals(plain).cached_tokens
    # The batch always keeps the last `keep` results and clears at least clear_at_least tokens when it fires.
    last = requests_under(batched, n)[-1][0]
    assert all(m.content != batched.placeholder for m in last[-4:] if m.role == "tool")


def test_batch_variant_needs_a_batch_size() -> None:
    try:
        AnthropicClearToolUsesPolicy(clear_in_batches=True)
    except ValueError as exc:
        assert "clear_at_least" in str(exc)
    else:
        raise AssertionError("clear_in_batches without clear_at_least was accepted")


def big_meeting(n: int = 40) -> Meeting:
    turns = tuple(TranscriptTurn(f"Speaker {i % 3}", f"Turn {i} is about topic {i % 7} " + "filler words " * 30)
                  for i in range(n))
    return Meeting("Toy002", "Product", turns, (), (), ())


async def test_retention_rows_carry_the_cache_of_the_requests_projected_by_hand() -> None:
    meeting = big_meeting()
    td = qmsum_tool_delivery(meeting, "s", chunk_turns=10)
    case = toy_case(meeting, (TextSpan(0, 0),))
    question = Question(case.case_id, case.query, qmsum_tool_evidence(case, td.events))
    arm = Arm("clear", "lossy", lambda settings, model: [mechanism("langchain_clear_tool_uses", trigger=1500, keep=1)])
    for a in (retention_arms()["long_context"], arm):
        (row,) = await measure_retention(list(td.events), [question], a, session_id="s", delivery="tool_results",
                                         tools=td.tools, cache_profile="openai")
        by_hand = []
        points = [*request_points(list(td.events)), (len(td.events), question_event("s", case.query, list(td.events)))]
        mechanisms = a.mechanisms(None, None)
        for length, current in points:
            result = await project(Session("a", "u", "s", events=list(td.events[:length])), mechanisms, current,
                                   ModelInfo("m", 0), tools=td.tools, context_window=8192)
            by_hand.append((result.request.messages, result.request.tools))
        expected = totals(cache_sequence(by_hand, "openai"))
        assert row.cache == expected
        assert row.cache.prompt_tokens == row.total_prompt_tokens
    # Long context only appends: cached, never busted.
    (long_row,) = await measure_retention(list(td.events), [question], retention_arms()["long_context"],
                                          session_id="s", delivery="tool_results", tools=td.tools,
                                          cache_profile="openai")
    assert long_row.cache is not None and long_row.cache.n_busts == 0 and long_row.cache.cached_tokens > 0
    (no_cache,) = await measure_retention(list(td.events), [question], arm, session_id="s", delivery="tool_results",
                                          tools=td.tools)
    assert no_cache.cache is None


def test_cli_cache_columns_in_json_and_the_missing_price_said_once() -> None:
    code, out, err = run_cli("retention", "qmsum", "--limit", "2", "--arms", "long_context,anthropic_clear_tool_uses",
                             "--set", "dataset.delivery=tool_results", "--cache-profile", "openai", "--json",
                             "--no-store")
    assert code == 0, err
    result = json.loads(out)
    assert result["cache_profile"] == "openai" and result["price_model"] == "gpt-4.1"
    by_arm = {s["arm"]: s for s in result["summaries"]}
    long_context = by_arm["long_context"]["extra"]
    assert long_context["raw_tokens"] == by_arm["long_context"]["mean_total_prompt_tokens"]
    assert long_context["cache_busts"] == 0 and long_context["cached_tokens"] > 0
    assert long_context["net_cost_usd"] < long_context["raw_cost_usd"]
    assert by_arm["anthropic_clear_tool_uses"]["extra"]["cache_busts"] > 0
    assert set(result["rankings"]) == {"long_context", "anthropic_clear_tool_uses"}
    code, out, err = run_cli("retention", "qmsum", "--limit", "1", "--arms", "long_context",
                             "--set", "dataset.delivery=tool_results", "--cache-profile", "anthropic",
                             "--price-model", "no-such-model", "--no-store")
    assert code == 0, err
    assert out.count("no price for no-such-model in data/prices.toml: cost columns omitted") == 1
    assert "net $" not in out and "written" in out


def test_the_batch_field_stays_out_of_run_ids_at_its_default() -> None:
    from agentlab.bench.config import apply_overrides, load_settings
    from agentlab.bench.tasks import get_task

    base = load_settings("qmsum", get_task("qmsum").default_settings())
    fraction = apply_overrides(base, ["anthropic_clear_tool_uses.trigger_fraction=0.9"]).identity()
    # A run made before the field existed, with another field of the section set, keeps its id.
    assert fraction["anthropic_clear_tool_uses"]["trigger_fraction"] == 0.9
    assert "clear_in_batches" not in fraction["anthropic_clear_tool_uses"]
    batched = apply_overrides(base, ["anthropic_clear_tool_uses.clear_at_least=4096",
                                     "anthropic_clear_tool_uses.clear_in_batches=true"]).identity()
    assert batched["anthropic_clear_tool_uses"]["clear_in_batches"] is True
