"""Real aider, a few turns, through the proxy's summary arm in front of the local test server.

    python3 -m venv /tmp/aider-venv && /tmp/aider-venv/bin/pip install aider-chat==0.86.2
    .venv/bin/python benchmarks/perf/bench_aider.py [TURNS] [AIDER]

aider lives in a venv of its own (never the project's); each turn is one ``aider --message`` run
(``--restore-chat-history``, ``--max-chat-history-tokens 1024`` so that it summarises its own
history) on a throwaway folder. Prints every call row and the client's tokens against the
upstream's plus the summaries'.
"""
# ruff: noqa: E401, E402, E702, I001, S603
import os, subprocess, sys, tempfile, time
from pathlib import Path

from agentlab.serve import start_server
from agentlab.testing.openai_server import OpenAITestServer

turns = int(sys.argv[1]) if len(sys.argv) > 1 else 6
aider = sys.argv[2] if len(sys.argv) > 2 else "/tmp/aider-venv/bin/aider"
if not Path(aider).exists():
    sys.exit(f"error: no aider at {aider}; install it in a venv of its own (see this file's docstring)")
work = Path(tempfile.mkdtemp(prefix="aider-"))
for i in range(1, 5):
    (work / f"mod{i}.py").write_text("\n".join(f"def handler_{i}_{k}(request):\n    return render(request, 'p{k}.html')\n"
                                                for k in range(40)))
with tempfile.TemporaryDirectory() as tmp, OpenAITestServer() as upstream, start_server(
        upstream=upstream.base_url, arm="summary", db=str(Path(tmp) / "s.duckdb"), fsync=False,
        context_window=8192) as server:
    env = {**os.environ, "OPENAI_API_KEY": "k", "AIDER_ANALYTICS": "false", "HOME": str(work)}
    env.pop("PYTHONPATH", None)
    for t in range(1, turns + 1):
        cmd = [aider, "--model", "openai/test-model", "--weak-model", "openai/test-model",
               "--openai-api-base", server.base_url, "--no-git", "--yes-always", "--no-stream", "--no-pretty",
               "--no-check-update", "--no-show-model-warnings", "--analytics-disable", "--map-tokens", "0",
               "--restore-chat-history", "--max-chat-history-tokens", "1024", "--edit-format", "whole",
               "--message", f"Turn {t}: explain what mod{(t - 1) % 4 + 1}.py does, in detail.", f"mod{(t - 1) % 4 + 1}.py"]
        began = time.time()
        r = subprocess.run(cmd, cwd=work, env=env, capture_output=True, text=True, timeout=300)
        print(f"aider turn {t}: exit {r.returncode} in {time.time() - began:.1f}s", flush=True)
        if r.returncode:
            print(r.stdout[-1500:], r.stderr[-1500:])
    calls = server.calls()
import pandas as pd
with pd.option_context("display.width", 200, "display.max_columns", None):
    print(calls[["purpose", "key_source", "ledger_mode", "client_messages", "client_prompt_tokens",
                 "upstream_prompt_tokens", "usage_prompt_tokens", "usage_completion_tokens", "summary_reused_events",
                 "arm_note"]].to_string())
a = calls[calls["purpose"] == "answer"]; s = calls[calls["purpose"] == "summary"]
client, sent = int(a["client_prompt_tokens"].sum()), int(a["upstream_prompt_tokens"].sum())
spent = int((s["usage_prompt_tokens"] + s["usage_completion_tokens"]).sum())
print(f"client {client}, upstream {sent}, summaries {spent} ({len(s)} calls): upstream + summaries = {sent + spent} "
      f"({100 * (sent + spent - client) / max(client, 1):+.1f} % of the client's)")
