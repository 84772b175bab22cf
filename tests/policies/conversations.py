"""Seeded conversations for the differential tests: the same list goes to the peer and to us.

Random lengths, single and parallel tool calls, short and long results, assistant text between
rounds, and (on request) a trailing assistant message, so every branch of a peer's policy is
reached across a few hundred seeds.
"""

from __future__ import annotations

import json
import random

from agentlab.events import Message, ToolCall

TOOLS = ("search", "read_file", "run", "lookup", "fetch")
WORDS = ("alpha", "beta", "gamma", "delta", "kappa", "sigma", "omega", "theta", "lambda", "zeta")


def text(rng: random.Random, low: int, high: int) -> str:
    """A few random words."""
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(low, high)))


def conversation(seed: int, *, tools: tuple[str, ...] = TOOLS, max_rounds: int = 6,
                 end_with_assistant: float = 0.15, start_with_user: bool = True) -> list[Message]:
    """One seeded conversation: user turns, tool rounds (some parallel), results short and long."""
    rng = random.Random(seed)
    out: list[Message] = []
    call_no = 0
    for turn in range(rng.randint(1, max_rounds)):
        if turn > 0 or start_with_user:
            out.append(Message.user(f"question {turn}: " + text(rng, 2, 30)
                                    + ("\n" + text(rng, 20, 300) if rng.random() < 0.2 else "")))
        for _ in range(rng.choice((0, 1, 1, 2, 3))):
            calls = []
            for _ in range(rng.choice((1, 1, 1, 2, 3))):
                call_no += 1
                args = {"q": text(rng, 1, 6)} if rng.random() < 0.8 else {}
                calls.append(ToolCall(f"call_{seed}_{call_no}", rng.choice(tools), json.dumps(args)))
            out.append(Message.assistant(text(rng, 0, 8) if rng.random() < 0.3 else "", calls))
            for c in calls:
                size = rng.choice((3, 10, 40, 400)) if rng.random() < 0.9 else 2000
                body = text(rng, 1, size)
                if size >= 40 and rng.random() < 0.5:  # multi-line output (partial trims split on lines)
                    words = body.split(" ")
                    body = "\n".join(" ".join(words[i:i + 12]) for i in range(0, len(words), 12))
                out.append(Message.tool(c.id, c.name, body))
        if rng.random() < 0.8:
            out.append(Message.assistant(f"answer {turn}: " + text(rng, 1, 40)))
    if out and out[-1].role == "assistant" and rng.random() > end_with_assistant:
        out.append(Message.user("go on " + text(rng, 0, 5)))
    return out
