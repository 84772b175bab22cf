"""SummaryPolicy: defaults, JSON round-trip, validation; trigger checks; prompts."""

from __future__ import annotations

import json

import pytest

from agentlab.summary import (
    COMPACT_PROMPT_VERSION,
    NINE_SECTION_PROMPT_VERSION,
    ContextRatioCheck,
    EventsOverCheck,
    IdleOverCheck,
    SummaryPolicy,
    TokensOverCheck,
    TriggerObservation,
    checks_pass,
)


def test_defaults_are_the_reference_defaults():
    p = SummaryPolicy()
    assert (p.context_ratio, p.context_floor_tokens, p.context_fallback_window) == (None, 2000, 8192)
    assert (p.events_over, p.tokens_over, p.idle_over, p.checks_mode) == (None, None, None, "all")
    assert (p.prompt, p.injection, p.cache_safe_fork, p.input_budget_ratio) == ("compact", "system", False, 0.7)
    assert (p.workers, p.queue_size, p.job_timeout) == (3, 100, 60.0)
    assert p.trigger_checks() == []


def test_json_round_trip_is_exact():
    p = SummaryPolicy(context_ratio=0.5, events_over=2, checks_mode="any", prompt="nine_section",
                      max_summary_words=120, skip_recent=1, injection="user", cache_safe_fork=True,
                      filter_key_allowlist=("app/a", "app/b"), workers=1, queue_size=10, job_timeout=30.0)
    again = SummaryPolicy.from_dict(json.loads(json.dumps(p.to_dict())))
    assert again == p and hash(again) == hash(p)


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"context_ratio": 1.5}, "context_ratio"),
        ({"checks_mode": "some"}, "checks_mode"),
        ({"injection": "assistant"}, "injection"),
        ({"events_over": -1}, "events_over"),
        ({"prompt": "Summarise please."}, "{conversation_text}"),
        ({"prompt": "{conversation_text} in {language}"}, "{language}"),
        ({"prompt": "{conversation_text}", "max_summary_words": 50}, "{max_summary_words}"),
        ({"prompt": "nine_sections"}, "unknown built-in prompt 'nine_sections'; built-in prompts: compact, nine_section"),
        ({"prompt": "Compact"}, "unknown built-in prompt 'Compact'"),
    ],
)
def test_bad_policies_fail_with_one_clear_line(kwargs, fragment):
    with pytest.raises(ValueError) as info:
        SummaryPolicy(**kwargs)
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_unknown_field_in_json_is_named():
    with pytest.raises(ValueError, match="events_ovr"):
        SummaryPolicy.from_dict({"events_ovr": 3})


def test_prompt_versions():
    assert SummaryPolicy().prompt_version == COMPACT_PROMPT_VERSION
    assert SummaryPolicy(prompt="nine_section").prompt_version == NINE_SECTION_PROMPT_VERSION
    custom = SummaryPolicy(prompt="Recap: {conversation_text}").prompt_version
    assert custom.startswith("custom-") and custom != SummaryPolicy(prompt="Sum: {conversation_text}").prompt_version


def obs(events=3, tokens=100, prev=0, window=8192, idle=None):
    return TriggerObservation(delta_events=events, delta_tokens=tokens, previous_summary_tokens=prev,
                              context_window=window, idle_seconds=idle)


def test_events_over_is_strict():
    check = EventsOverCheck(4)
    assert not check.passes(obs(events=4))
    assert check.passes(obs(events=5))


def test_tokens_over_and_idle_over_are_strict():
    assert not TokensOverCheck(100).passes(obs(tokens=100)) and TokensOverCheck(100).passes(obs(tokens=101))
    assert not IdleOverCheck(60).passes(obs(idle=60)) and IdleOverCheck(60).passes(obs(idle=61))
    assert not IdleOverCheck(60).passes(obs(idle=None))


def test_context_ratio_threshold_uses_window_floor_and_counts_previous_summary():
    check = ContextRatioCheck(0.5, 2000)
    assert check.threshold(8192) == 4096
    assert check.threshold(1000) == 2000  # floor
    assert not check.passes(obs(tokens=4000, prev=96, window=8192))
    assert check.passes(obs(tokens=4000, prev=97, window=8192))


def test_all_of_versus_any_of_and_no_checks():
    checks = [EventsOverCheck(10), TokensOverCheck(50)]
    o = obs(events=4, tokens=100)
    assert not checks_pass(checks, "all", o)
    assert checks_pass(checks, "any", o)
    assert checks_pass([], "all", o)  # no checks: whenever there is content
    assert not checks_pass([], "all", obs(events=0, tokens=0))


def test_policy_builds_its_checks():
    p = SummaryPolicy(context_ratio=0.5, events_over=2, tokens_over=10, idle_over=5.0)
    names = [c.name for c in p.trigger_checks()]
    assert names == ["context_ratio", "events_over", "tokens_over", "idle_over"]


def test_allowlist_matches_hierarchically_both_ways():
    p = SummaryPolicy(filter_key_allowlist=("app/research",))
    assert p.allows_key("") and p.allows_key("app/research") and p.allows_key("app/research/web")
    assert p.allows_key("app") and not p.allows_key("app/billing")
