"""``python -m agentlab.serve``: serve (proxy or agent back end), or ``report`` the savings of a database."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from typing import TextIO

PROG = "python -m agentlab.serve"


def _serve_parser() -> argparse.ArgumentParser:
    from agentlab.serve.conversations import MAX_CONVERSATION_BYTES
    from agentlab.serve.http import HEAD_TIMEOUT, IDLE_TIMEOUT, MAX_BODY_BYTES
    from agentlab.serve.server import LEDGER_LINGER
    from agentlab.serve.store import FLUSH_INTERVAL, MAX_CONVERSATIONS, WRITER_NICE
    from agentlab.serve.wire import MAX_MESSAGE_BYTES, MAX_MESSAGES

    p = argparse.ArgumentParser(
        prog=PROG, description="A context-governing OpenAI-compatible server (POST /v1/chat/completions, "
                               "GET /v1/models, GET /health). Use 'report' to read its savings.")
    p.add_argument("--upstream", help="proxy back end: the OpenAI base URL to forward to (http://host:port/v1)")
    p.add_argument("--arm", default="long_context",
                   help="proxy back end: the arm whose projection goes upstream (long_context, the default, "
                        "forwards unrewritten; passthrough is its older name), summary, summary+recall, or any "
                        "arm of python -m agentlab.bench: compaction, rolling_summary, peer policies, "
                        "<arm>+recall, arms of the modules $AGENTLAB_EXTENSIONS names")
    p.add_argument("--agent", help="agent back end: module:factory returning an agentlab LLMAgent")
    p.add_argument("--db", default="serve.duckdb", help="DuckDB file of the ledger and call log (default serve.duckdb)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1; others need --api-key)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 = a free one)")
    p.add_argument("--api-key", action="append", default=[],
                   help="require a bearer token of every client: this one (repeat for several callers; "
                        "each key is its own tenant, whose conversations the others never reach)")
    p.add_argument("--api-key-file", help="more keys, one a line (# comments), each its own tenant")
    p.add_argument("--upstream-api-key", help="key sent upstream (default: forward the client's Authorization)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds an upstream call may take (default 60)")
    p.add_argument("--max-recall-rounds", type=int, default=3, help="server-run tool rounds per call (default 3)")
    p.add_argument("--context-window", type=int, help="window for the arm's triggers (default: what upstream states)")
    p.add_argument("--wait-for-ledger", action="store_true",
                   help="an answer waits until its turn is committed (default: errors wait, answers do not)")
    p.add_argument("--max-conversations", type=int, default=MAX_CONVERSATIONS,
                   help="conversations kept in memory; the least recently used idle one beyond this is "
                        f"evicted and reloaded from the database when it comes back (default {MAX_CONVERSATIONS})")
    p.add_argument("--max-conversation-bytes", type=int, default=MAX_CONVERSATION_BYTES, metavar="BYTES",
                   help="ledger text the idle conversations in memory may hold; beyond it the least recently "
                        f"used are evicted like --max-conversations (default {MAX_CONVERSATION_BYTES})")
    p.add_argument("--no-summary-budget", action="store_true",
                   help="a summarising arm makes every summary its policy asks for (default: a summary waits "
                        "until the tokens saved cover what the last one cost, so it never costs more than it saves)")
    p.add_argument("--ledger-linger", type=float, default=LEDGER_LINGER, metavar="SECONDS",
                   help="proxy back end: how long a ledger commit waits for other conversations' events to "
                        f"join it, off the answer's path (default {LEDGER_LINGER}; 0 with --wait-for-ledger)")
    p.add_argument("--flush-interval", type=float, default=FLUSH_INTERVAL, metavar="SECONDS",
                   help="how long call rows and the proxy's conversation index wait to be committed together "
                        f"(default {FLUSH_INTERVAL}; a kill -9 loses at most this much of the call log)")
    p.add_argument("--writer-nice", type=int, default=WRITER_NICE, metavar="N",
                   help="niceness of the thread that commits call rows and the proxy's ledger, which no "
                        f"answer waits for (0-19, default {WRITER_NICE}; 0 = normal priority; Linux only)")
    p.add_argument("--max-body-bytes", type=int, default=MAX_BODY_BYTES,
                   help=f"largest request body accepted, bytes (default {MAX_BODY_BYTES}; beyond it: 413)")
    p.add_argument("--max-messages", type=int, default=MAX_MESSAGES,
                   help=f"proxy back end: most messages a request may hold (default {MAX_MESSAGES}; beyond: 413)")
    p.add_argument("--max-message-bytes", type=int, default=MAX_MESSAGE_BYTES,
                   help="proxy back end: largest message the ledger stores, bytes "
                        f"(default {MAX_MESSAGE_BYTES}; beyond: 413)")
    p.add_argument("--head-timeout", type=float, default=HEAD_TIMEOUT, metavar="SECONDS",
                   help=f"a request head must arrive within this of its first byte (default {HEAD_TIMEOUT:g})")
    p.add_argument("--idle-timeout", type=float, default=IDLE_TIMEOUT, metavar="SECONDS",
                   help="a connection without a request (or a body still arriving) is closed after this "
                        f"(default {IDLE_TIMEOUT:g})")
    p.add_argument("--no-fsync", action="store_true", help="do not fsync each commit (throwaway stores only)")
    return p


def report_main(argv: Sequence[str], out: TextIO | None = None, prog: str = f"{PROG} report") -> int:
    """``report``: the savings table and the prompt-cache table of a serve database or a running
    server (``--url``), written to ``out`` (stdout); errors are one ``error:`` line on stderr (2).
    ``python -m agentlab.bench report serve`` is this too.
    """
    out = out or sys.stdout
    p = argparse.ArgumentParser(prog=prog, description="Tokens saved per arm and conversation, "
                                                       "with the prompt-cache reuse beside them.")
    p.add_argument("--db", default="serve.duckdb", help="the server's DuckDB file (default serve.duckdb)")
    p.add_argument("--url", help="read a running server instead (its base URL, http://host:port/v1), "
                                 "while it holds the database file")
    p.add_argument("--api-key", help="with --url: the key the server asks for (the report is that key's tenant's)")
    p.add_argument("--by", default="arm,tenant,conversation_id",
                   help="comma-separated grouping columns (default arm,tenant,conversation_id)")
    p.add_argument("--cache-profile", default="openai", choices=["openai", "none"],
                   help="the prompt-cache model the estimate columns use (default openai; stated in the output)")
    p.add_argument("--price-model", default=None,
                   help="price every call as this model of data/prices.toml (default: each call's own model)")
    args = p.parse_args(argv)
    import pandas as pd

    from agentlab.model.prompt_caching import get_profile
    from agentlab.serve.analysis import savings_df, serve_calls_df
    from agentlab.serve.cache_report import cache_savings_df

    by = [c.strip() for c in args.by.split(",") if c.strip()]
    try:
        table = (savings_df(url=args.url, api_key=args.api_key, by=by) if args.url
                 else savings_df(args.db, by=by))
        cache, notes = cache_savings_df(args.db if not args.url else None, by=by, profile=args.cache_profile,
                                        price_model=args.price_model, url=args.url, api_key=args.api_key)
        calls = serve_calls_df(url=args.url, api_key=args.api_key) if args.url else serve_calls_df(args.db)
    except (FileNotFoundError, ValueError, KeyError, RuntimeError) as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    if table.empty:
        out.write(f"no answered calls in {args.url or args.db}\n")
        return 0
    with pd.option_context("display.max_columns", None, "display.width", 200):
        out.write(table.to_string(index=False) + "\n")
        out.write(f"\nprompt cache, estimated with the {args.cache_profile} profile from each call's shared prefix "
                  f"({get_profile(args.cache_profile).description}), beside what the upstream reported:\n")
        out.write(cache.to_string(index=False) + "\n")
    for note in notes:
        out.write(f"{note}\n")
    notes = calls["arm_note"].dropna().astype(str) if "arm_note" in calls else pd.Series([], dtype=str)
    waited = int(notes.str.contains("summary waits").sum())
    if waited:
        out.write(f"{waited} calls passed on the summary they had instead of a new one: a new summary would have "
                  "cost more than the summaries saved so far (serve_calls.arm_note; --no-summary-budget makes every "
                  "summary)\n")
    rewrites = int(notes.str.startswith("client rewrite").sum())
    if rewrites:
        out.write(f"{rewrites} calls followed a client's rewrite of its own history and carried no summary across it "
                  "(nothing could be saved there): sent as the client sent them (serve_calls.arm_note)\n")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; returns the exit code."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["report"]:
        return report_main(argv[1:])
    args = _serve_parser().parse_args(argv)
    from agentlab.serve.memory import hand_back_large_blocks

    hand_back_large_blocks()  # before any thread (DuckDB's, the writer's) makes a malloc arena of its own
    from agentlab.serve.server import ServeApp, ServeConfig, serve_forever

    config = ServeConfig(upstream=args.upstream, arm=args.arm, agent=args.agent, db=args.db, host=args.host,
                         port=args.port, api_keys=tuple(args.api_key), api_key_file=args.api_key_file,
                         upstream_api_key=args.upstream_api_key, max_body_bytes=args.max_body_bytes,
                         max_messages=args.max_messages, max_message_bytes=args.max_message_bytes,
                         head_timeout=args.head_timeout, idle_timeout=args.idle_timeout,
                         timeout=args.timeout, max_recall_rounds=args.max_recall_rounds,
                         context_window=args.context_window, fsync=not args.no_fsync,
                         wait_for_ledger=args.wait_for_ledger, max_conversations=args.max_conversations,
                         ledger_linger=args.ledger_linger, writer_nice=args.writer_nice,
                         flush_interval=args.flush_interval, max_conversation_bytes=args.max_conversation_bytes,
                         summary_budget=not args.no_summary_budget)
    try:
        config.check()
    except ValueError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    from agentlab.model import tokens

    # Loaded now, not by the first request's counting: loading holds the interpreter lock for a
    # few tenths of a second, which every call then in flight would wait out.
    tokens.get_encoding()

    def ready(app: ServeApp) -> None:
        back_end = f"proxy to {config.upstream} (arm {config.arm})" if config.upstream else f"agent {config.agent}"
        print(f"serving {app.base_url} — {back_end}; ledger and calls in {config.db}", flush=True)
        for warning in config.warnings():
            sys.stderr.write(f"warning: {warning}\n")

    try:
        asyncio.run(serve_forever(config, ready))
    except KeyboardInterrupt:
        pass
    except (OSError, RuntimeError, ValueError) as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
