"""The bare-client side of ``bench_executor.py --scenario mtbench101``: MT-Bench-101 dialogues sent with
nothing but ``openai.AsyncOpenAI`` (no agentlab import, no cache, no store, no session).

It replays the dependency structure of the harness's baseline run: the turns of one dialogue
are sequential (turn k's prompt is the dialogue's user turns 1..k with the server's answers to
turns 1..k-1 between them, exactly what the full-history baseline sends), and ``--concurrency``
dialogues are in flight at once (an ``asyncio.Semaphore`` taken per dialogue, dialogues started
in file order — the harness's in-process executor schedules its cases the same way). Every
request carries the run's generation settings (``temperature``, ``max_tokens``). Run by
``bench_executor.py``::

    python benchmarks/perf/mtbench_bare_client.py DIALOGUES.json BASE_URL MODEL [--concurrency 16]

``DIALOGUES.json``: ``{"temperature": .., "max_tokens": .., "dialogues": [{"id": .., "turns": [user
text, ...]}, ...]}``. Prints one JSON line: ``calls``, ``prompt_tokens``, ``completion_tokens``,
``import_s`` (interpreter start to the client built), ``calls_s`` (first request sent to last
answer), all measured here.
"""

from __future__ import annotations

import time

T0 = time.perf_counter()

import argparse  # noqa: E402  (the clock starts before the imports it measures)
import asyncio  # noqa: E402
import json  # noqa: E402
from typing import Any  # noqa: E402

import openai  # noqa: E402


async def replay(spec: dict[str, Any], base_url: str, model: str, concurrency: int) -> dict[str, Any]:
    """Send every dialogue's turns in order, ``concurrency`` dialogues at a time; the counts and times."""
    client = openai.AsyncOpenAI(api_key="bare", base_url=base_url, max_retries=0, timeout=60.0)
    built = time.perf_counter()
    semaphore = asyncio.Semaphore(concurrency)
    totals = {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0}

    async def dialogue(turns: list[str]) -> None:
        async with semaphore:
            history: list[dict[str, str]] = []
            for user in turns:
                history.append({"role": "user", "content": user})
                reply = await client.chat.completions.create(
                    model=model, messages=history,  # type: ignore[arg-type]
                    temperature=spec["temperature"], max_tokens=spec["max_tokens"])
                answer = reply.choices[0].message.content or ""
                history.append({"role": "assistant", "content": answer})
                totals["calls"] += 1
                if reply.usage is not None:
                    totals["prompt_tokens"] += reply.usage.prompt_tokens
                    totals["completion_tokens"] += reply.usage.completion_tokens

    started = time.perf_counter()
    await asyncio.gather(*(dialogue(d["turns"]) for d in spec["dialogues"]))
    ended = time.perf_counter()
    await client.close()
    return {**totals, "import_s": built - T0, "calls_s": ended - started}


def main() -> None:
    """Parse the arguments, replay the dialogues, print the JSON line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dialogues")
    parser.add_argument("base_url")
    parser.add_argument("model")
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    with open(args.dialogues, encoding="utf-8") as f:
        spec = json.load(f)
    print(json.dumps(asyncio.run(replay(spec, args.base_url, args.model, args.concurrency))), flush=True)


if __name__ == "__main__":
    main()
