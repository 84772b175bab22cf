"""A scripted client that rewrites its own history the way aider does, for the serve tests and benchmarks.

Each turn asks about a new file (about 1,600 tokens of it); before turns 5 and 7 the client drops
its oldest turns for a short summary of its own ("I spoke to you previously about ...") and keeps
the last two. Through a summarising arm every rewrite leaves the proxy's summary behind.
"""

from __future__ import annotations

from typing import Any

SYSTEM = {"role": "system", "content": "You are a coding assistant. Answer about the repository."}
#: Turns before which the client replaces its oldest turns with its own summary.
REWRITE_TURNS = (5, 7)


def file_text(turn: int) -> str:
    """The file the client asks about at ``turn``."""
    return " ".join(f"Line {i} of file_{turn}.py: def handler_{turn}_{i}(request): return render(request, 'p{i}.html')"
                    for i in range(60))


def self_summarising_client(base_url: str, turns: int = 8, api_key: str = "k") -> None:
    """Run ``turns`` turns of the client against ``base_url`` (an OpenAI base URL)."""
    import openai

    client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    history: list[dict[str, Any]] = []
    for turn in range(1, turns + 1):
        if turn in REWRITE_TURNS:
            history = [{"role": "user", "content": f"I spoke to you previously about a number of things: the "
                                                   f"handlers of files 1 to {turn - 2}."},
                       {"role": "assistant", "content": "Ok."}, *history[-4:]]
        messages = [SYSTEM, *history,
                    {"role": "user", "content": f"Turn {turn}: explain this file.\n{file_text(turn)}"}]
        answer = client.chat.completions.create(model="test-model", messages=messages)  # type: ignore[arg-type]
        history += [messages[-1], {"role": "assistant", "content": answer.choices[0].message.content}]
