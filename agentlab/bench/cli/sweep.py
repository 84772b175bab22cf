"""``python -m agentlab.bench sweep``: one mode over a grid of settings, each point an ordinary run.

The sweep stores nothing of its own: every point is a resumable variant run, resolved into its
:class:`~agentlab.bench.spec.RunSpec` before the first one starts and carried out by
:func:`agentlab.bench.cli.run.run_spec`, so a rerun finishes only what is missing.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections.abc import Sequence
from typing import TextIO

from agentlab.bench.cli.common import CliError, print_json, run_parser
from agentlab.bench.cli.run import run_spec, spec_of
from agentlab.bench.spec import write_smoke_banner
from agentlab.bench.tasks import get_task


def _grid_points(grid: Sequence[str], shared: Sequence[str]) -> list[list[str]]:
    """``["a.b=1,2", "c.d=x,y"]`` → the product as ``--set`` lists; a key given twice is an error."""
    axes: list[list[str]] = []
    keys: list[str] = []
    shared_keys = {a.split("=", 1)[0].strip() for a in shared}
    for item in grid:
        key, sep, raw = item.partition("=")
        key = key.strip()
        values = [v.strip() for v in raw.split(",") if v.strip()]
        if not sep or not key or not values:
            raise CliError(f"--grid {item!r}: expected section.field=v1,v2[,...]")
        if key in keys or key in shared_keys:
            raise CliError(f"--grid {key}: the setting is given twice (in --grid or --set); give it once")
        if len(set(values)) != len(values):
            raise CliError(f"--grid {item!r}: a value is listed twice")
        keys.append(key)
        axes.append([f"{key}={v}" for v in values])
    return [list(point) for point in itertools.product(*axes)]


def cmd_sweep(args: argparse.Namespace, run_flags: Sequence[str], out: TextIO) -> int:
    """Run the baseline once, then each grid point as an ordinary resumable run with ``run_flags``.

    The sweep stores nothing of its own; a failed step stops it, and the same command finishes it.
    """
    import io

    task = get_task(args.benchmark)
    mode = args.mode or task.default_mode
    if not task.has_arm(mode):
        raise CliError(f"{task.name}: unknown arm {mode!r}; arms: {', '.join(task.arm_names())}")
    parser = run_parser("python -m agentlab.bench")
    shared = parser.parse_args([task.name, "--mode", mode, *run_flags])
    for flag, used in (("--dry-run", shared.dry_run), ("--retrieval-only", shared.retrieval_only),
                       ("--variant", shared.variant is not None)):
        if used:
            raise CliError(f"sweep: {flag} is not for sweeps (each point's variant is named by its --grid settings)")
    points = _grid_points(args.grid, shared.overrides)
    roles = task.roles()
    plan: list[tuple[str, list[str]]] = []
    if roles is not None and mode != roles.baseline and not args.no_baseline:
        plan.append((roles.baseline, []))
    plan += [(mode, [a for assignment in point for a in ("--set", assignment)]) for point in points]
    # Every step is resolved (settings, policies, budget, variant) before the first model call.
    steps = [parser.parse_args([task.name, *run_flags, *point_flags, "--mode", step_mode, "--json", "--no-baselines"])
             for step_mode, point_flags in plan]
    specs = [spec_of(step_args, task) for step_args in steps]  # one task: each arm looked up once
    results = []
    for step, ((step_mode, point_flags), step_args, spec) in enumerate(zip(plan, steps, specs, strict=True), 1):
        buffer = io.StringIO()
        write_smoke_banner(spec, sys.stderr)
        status = run_spec(spec, buffer, json_output=True, db=step_args.db, executor_args=step_args)
        if status != 0:
            sys.stderr.write(f"sweep stopped at step {step} of {len(plan)} ({step_mode} "
                             f"{' '.join(point_flags[1::2]) or 'default'}); rerun the same command to finish the rest\n")
            return status
        run = json.loads(buffer.getvalue())
        results.append(run)
        if not shared.json:
            out.write(f"[{step}/{len(plan)}] {task.name}/{step_mode} variant {run['variant']} run {run['run_id']}: "
                      f"{run['already_done']} already stored, {run['ok']} ok and {run['failed']} failed now, "
                      f"of {run['selected']} selected\n")
    if shared.json:
        print_json({"benchmark": task.name, "mode": mode, "grid": list(args.grid), "runs": results}, out)
    else:
        out.write(f"sweep done: {len(points)} variant(s) of {mode}; compare them with "
                  f"`python -m agentlab.bench report {task.name} --db {shared.db}`\n")
    return 0


