"""How many (step, support) pairs each rule of ``agentlab.bench.retention.supports`` removes, per dataset.

    AGENTLAB_DATA_DIR=... python benchmarks/counts/supports_rules.py [--datasets tau_bench,swe_agent]

Prints, per dataset: the pairs under every rule (the current definition), with every rule off (the
definition before them, ``supports-v1``), and with one rule off at a time (what each rule removes alone from the old
definition, and what it adds to the other two). Also the tool results with empty content (tau-bench's ``think``)
and how many ``long_context`` step requests differ from the recorded history before the step.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses

from agentlab.bench.datasets.trajectories import DATASETS, load_trajectories
from agentlab.bench.retention.supports import Rules, step_supports
from agentlab.bench.retention.trajectories import step_requests
from agentlab.policies.arms import full_history_arm


def pairs(trajectories: list, rules: Rules) -> int:
    """(step, support) pairs over ``trajectories``."""
    return sum(len(s.supports) for t in trajectories for s in step_supports(t.events, t.instruction, rules))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default=",".join(DATASETS))
    args = parser.parse_args()
    for dataset in args.datasets.split(","):
        trajectories = list(load_trajectories((dataset,)).trajectories)
        print(f"{dataset}: {len(trajectories)} trajectories")
        now = pairs(trajectories, Rules())
        print(f"  pairs, every rule:           {now}")
        before = pairs(trajectories, Rules(False, False, False))
        print(f"  pairs, no rule (supports-v1): {before}")
        for field in ("user_forms", "agent_first", "once_per_text"):
            off = pairs(trajectories, dataclasses.replace(Rules(), **{field: False}))
            alone = pairs(trajectories, dataclasses.replace(Rules(False, False, False), **{field: True}))
            print(f"  {field:14s} alone removes {before - alone:4d} of supports-v1's pairs; "
                  f"with the other rules on, {off - now} more")
        empty = [e for t in trajectories for e in t.events
                 if e.message is not None and e.message.role == "tool" and not e.message.content]
        differ = 0
        for t in trajectories:
            for r in asyncio.run(step_requests(t, full_history_arm("long_context"), context_window=1 << 30)):
                shown = [m for m in r.messages if m.role != "system"]
                differ += shown != [e.message for e in t.events[:r.index] if e.message is not None]
        print(f"  empty tool results: {len(empty)}; long_context step requests that are not exactly the "
              f"recorded history: {differ}")

if __name__ == "__main__":
    main()
