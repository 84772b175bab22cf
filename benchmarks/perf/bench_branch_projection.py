"""Per-call cost of projecting a request for a branch, against a plain session's (prints figures and a verdict).

The claim: projecting the request of one model call for a branch (its filter key; the view keeps
its ancestors' events and its own, :func:`agentlab.core.in_filter`) costs within 10 % of the same
call in a plain session, at 1,000 and 5,000 ledger events.

Three sessions per size, built from the same synthetic tool-using chat (``bench_projection.unit``):

* ``plain`` — every event unkeyed, the call under the full-session key ``""``;
* ``branch`` — the same events, the first half on ``main`` and the rest on ``main/a``, the call under
  ``main/a``: the same messages are projected, so the difference is the branch filter alone;
* ``branch+siblings`` — as ``branch``, plus a sibling ``main/b`` writing as many events as ``main/a``
  interleaved (the ledger is larger; the view is the same). Shown for information.

"Per call" is what a live agent pays: one new event on the caller's key, then ``build_request``
(instruction, history, current input, compaction on), through the incremental projection cache
(``incremental``) and rebuilt from the ledger (``rebuild``, ``incremental_projection=False``).
Warm medians over ``--repeats`` calls (the layouts' calls interleaved, in a rotating order); the
first ``--warmup`` are not timed. On a shared machine single runs scatter by several per cent (the
rebuild at 5,000 events by up to a third, either way); the Python function calls of one build
(``calls``) are the load-independent measure of the same work.

Run::

    .venv/bin/python benchmarks/perf/bench_branch_projection.py [--repeats 300] [--sizes 1000 5000]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_projection import unit  # noqa: E402  (the shared synthetic chat)

from agentlab.compaction import CompactionPolicy  # noqa: E402
from agentlab.events import Event, user_event  # noqa: E402
from agentlab.model.base import ModelInfo  # noqa: E402
from agentlab.model.scripted import ScriptedModel  # noqa: E402
from agentlab.runtime import Invocation, LLMAgent, RunOptions  # noqa: E402
from agentlab.session.inmemory import InMemorySessionService  # noqa: E402

LAYOUTS = ("plain", "branch", "branch+siblings")


def _events(n: int, seed: int) -> list[Event]:
    rng = random.Random(seed)
    out: list[Event] = []
    i = 0
    while len(out) < n:
        out += unit(rng, i)
        i += 1
    return out[:n]


class Layout:
    """One session and agent of a layout; :meth:`call` appends a question and times one build."""

    def __init__(self, layout: str, incremental: bool) -> None:
        self.layout = layout
        self.view = "" if layout == "plain" else "main/a"
        self.svc = InMemorySessionService()
        self.agent = LLMAgent("agent", ScriptedModel(default_reply="ok", info=ModelInfo("bench", 1_000_000)),
                              instruction="You are a logistics assistant.",
                              compaction=CompactionPolicy(enabled=True), incremental_projection=incremental)
        self.samples: list[float] = []

    async def build(self, n: int, seed: int) -> None:
        self.session = await self.svc.create_session("bench", "u", self.layout)
        for k, event in enumerate(_events(n, seed)):
            if self.layout != "plain":
                event.filter_key = "main" if k < n // 2 else "main/a"
            await self.svc.append_event(self.session, event)
            if self.layout == "branch+siblings" and k >= n // 2:
                sibling = event.copy_with(id=f"sib-{k}", filter_key="main/b", choices=list(event.choices))
                await self.svc.append_event(self.session, sibling)

    async def call(self, r: int, timed: bool) -> None:
        current = user_event(f"question {r}: the status of parcel {r}?", invocation_id=f"now-{r}",
                             request_id=f"now-{r}", filter_key=self.view)
        await self.svc.append_event(self.session, current)
        inv = Invocation(app_name="bench", user_id="u", session=self.session, session_service=self.svc,
                         agent=self.agent, message=current.message, options=RunOptions(), id=f"now-{r}",
                         user_event=current, filter_key=self.view)
        t0 = time.perf_counter()
        await self.agent.build_request(inv)
        if timed:
            self.samples.append((time.perf_counter() - t0) * 1000)


async def count_calls(n: int, incremental: bool, seed: int) -> dict[str, int]:
    """Python function calls of one build per layout (after a warm-up build): a load-independent measure."""
    counts: dict[str, int] = {}
    for name in LAYOUTS:
        layout = Layout(name, incremental)
        await layout.build(n, seed)
        await layout.call(0, timed=False)
        calls = [0]

        def profile(frame: object, event: str, arg: object, calls: list[int] = calls) -> None:
            if event == "call":
                calls[0] += 1

        sys.setprofile(profile)
        try:
            await layout.call(1, timed=False)
        finally:
            sys.setprofile(None)
        counts[name] = calls[0]
    return counts


async def time_layouts(n: int, repeats: int, warmup: int, incremental: bool, seed: int) -> dict[str, float]:
    """Median ms per call of each layout, the layouts' calls interleaved in a rotating order (so load
    drift and position hit all alike)."""
    layouts = [Layout(name, incremental) for name in LAYOUTS]
    for layout in layouts:
        await layout.build(n, seed)
    for r in range(warmup + repeats):
        # rotate who goes first: the first build of a round measured slower whichever layout it was
        for layout in layouts[r % len(layouts):] + layouts[:r % len(layouts)]:
            await layout.call(r, timed=r >= warmup)
    return {layout.layout: statistics.median(layout.samples) for layout in layouts}


async def main(sizes: list[int], repeats: int, warmup: int, seed: int) -> int:
    worst = 0.0
    print(f"{'events':>6} {'path':>11} " + " ".join(f"{name + ' ms':>20}" for name in LAYOUTS)
          + f" {'branch / plain':>15} {'calls plain':>11} {'calls branch':>12}")
    for n in sizes:
        for incremental in (True, False):
            times = await time_layouts(n, repeats, warmup, incremental, seed)
            calls = await count_calls(n, incremental, seed)
            ratio = times["branch"] / times["plain"]
            worst = max(worst, ratio)
            path = "incremental" if incremental else "rebuild"
            print(f"{n:>6} {path:>11} " + " ".join(f"{times[name]:>20.3f}" for name in LAYOUTS)
                  + f" {ratio:>15.3f} {calls['plain']:>11} {calls['branch']:>12}")
    verdict = "within" if worst <= 1.10 else "NOT within"
    print(f"\nworst branch / plain ratio {worst:.3f}: {verdict} 10 %")
    return 0 if worst <= 1.10 else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--repeats", type=int, default=300, help="timed calls per configuration")
    parser.add_argument("--warmup", type=int, default=20, help="untimed calls first")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    sys.exit(asyncio.run(main(args.sizes, args.repeats, args.warmup, args.seed)))
