"""What a client that rewrites its own history (as aider does) pays through a summarising arm, per turn.

    .venv/bin/python benchmarks/perf/bench_rewriting_client.py [--arm summary] [--context-window 8192]

Runs :func:`agentlab.testing.rewriting_client.self_summarising_client` (8 turns; it replaces its
oldest turns with its own summary before turns 5 and 7) through the proxy in front of the local
test server, with the summary budget on (the default) and off (``--no-summary-budget``), and prints
per turn the client's and the upstream's prompt tokens, then the totals with the summariser's tokens.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arm", default="summary")
    p.add_argument("--context-window", type=int, default=8192)
    args = p.parse_args()
    from agentlab.serve import start_server
    from agentlab.testing.openai_server import OpenAITestServer
    from agentlab.testing.rewriting_client import self_summarising_client

    for budget in (True, False):
        with tempfile.TemporaryDirectory() as tmp, OpenAITestServer() as upstream, start_server(
                upstream=upstream.base_url, arm=args.arm, db=str(Path(tmp) / "s.duckdb"), fsync=False,
                context_window=args.context_window, summary_budget=budget) as server:
            self_summarising_client(server.base_url)
            calls = server.calls()
        answers = calls[calls["purpose"] == "answer"].reset_index(drop=True)
        summaries = calls[calls["purpose"] == "summary"]
        answers["turn"] = answers.index + 1
        answers["summary_waited"] = answers["arm_note"].notna()
        print(f"arm {args.arm}, window {args.context_window}, summary budget {'on' if budget else 'off'}:")
        print(answers[["turn", "key_source", "client_prompt_tokens", "upstream_prompt_tokens",
                       "summary_waited"]].to_string(index=False))
        spent = int((summaries["usage_prompt_tokens"] + summaries["usage_completion_tokens"]).sum())
        client, sent = int(answers["client_prompt_tokens"].sum()), int(answers["upstream_prompt_tokens"].sum())
        print(f"client {client}, upstream {sent}, summaries {spent} ({len(summaries)} calls): upstream + summaries "
              f"= {sent + spent} ({100 * (sent + spent - client) / client:+.1f} % of the client's)\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
