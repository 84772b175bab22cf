"""The token economy of skills: what each arm's requests hold, and the table the command prints."""

from __future__ import annotations

import json

import pytest

from agentlab.examples.skills_economy import catalog, main, measure


def test_the_catalog_is_distinct_reproducible_and_bounded() -> None:
    names = [name for name, _, _ in catalog(200)]
    assert len(set(names)) == 200 and catalog(20, seed=3) == catalog(20, seed=3)
    assert catalog(20, seed=3) != catalog(20, seed=4)
    with pytest.raises(ValueError, match="at most 200"):
        catalog(201)


async def test_on_demand_is_cheaper_per_session_as_the_catalog_grows() -> None:
    small, large = await measure(5), await measure(100)
    assert small.on_demand_calls == large.on_demand_calls == 7  # two loads more than the baseline's five calls
    assert small.all_in_prompt_calls == 5
    assert large.listing_tokens > 10 * small.listing_tokens / 2
    assert large.ratio > small.ratio > 1.0
    # every skill in the prompt costs every call: the baseline per call grows with the catalog
    assert large.all_in_prompt_tokens_per_call > 10 * small.all_in_prompt_tokens_per_call


def test_the_command_prints_a_row_per_size(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--sizes", "5,20", "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["skills"] for r in rows] == [5, 20]
    assert main(["--sizes", "five"]) == 2
    assert "not a comma-separated list" in capsys.readouterr().err


async def test_each_arm_shows_what_it_claims() -> None:
    from agentlab.examples.skills_economy import run_arms

    arms = await run_arms(20)
    first, second = arms.used
    instructions = {s.name: s.instructions for s in arms.skills}

    def text(request: object) -> str:
        return "\n".join(m.content for m in request.messages)  # type: ignore[attr-defined]

    unused = [n for n in instructions if n not in arms.used]
    for request in arms.on_demand:
        assert arms.listing in request.messages[0].content
        assert not any(instructions[n] in text(request) for n in unused)
    assert text(arms.on_demand[-1]).count(instructions[first]) == 1  # loaded once, never repeated
    assert instructions[second] in text(arms.on_demand[-1])
    for request in arms.all_in_prompt:
        assert all(body in request.messages[0].content for body in instructions.values())
        assert request.tools and all(t["function"]["name"] == "run_diagnostic" for t in request.tools)


def test_the_docs_table_is_what_the_command_prints(capsys: pytest.CaptureFixture[str]) -> None:
    from pathlib import Path

    assert main([]) == 0
    printed = capsys.readouterr().out.strip()
    page = (Path(__file__).resolve().parents[2] / "docs" / "skills-overview.md").read_text(encoding="utf-8")
    assert printed in page, ("rerun python -m agentlab.examples.skills_economy and paste its table into "
                             "docs/skills-overview.md")
