"""What the server's call log says: tokens saved per conversation and arm, beside the cache they cost.

Token columns of ``serve_calls`` (all counted with the same local estimator, so they compare):

* ``client_prompt_tokens``: the prompt as the client sent it; ``upstream_prompt_tokens``: as it
  went upstream after the arm's projection (the first round of a call);
* ``client_prefix_tokens`` / ``upstream_prefix_tokens``: the leading messages each shares with the
  conversation's previous call, i.e. what a provider's prefix cache could reuse without the proxy
  and with it. Rewriting old messages saves tokens but can break that prefix: the
  ``cache_loss_tokens`` column shows the reuse given up, and ``uncached_*`` what is billed at the
  full rate on each side;
* ``usage_*``: what the upstream reported (summed over recall rounds), cached tokens included.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from agentlab.duckdb_files import connect
from agentlab.serve.store import CALL_COLUMNS, EXCHANGE_COLUMNS

#: ``serve_calls.purpose`` of the calls an arm's mechanisms made upstream (not the client's calls).
MECHANISM_PURPOSES = ("summary", "projection")


def _from_url(url: str, table: str, api_key: str | None) -> pd.DataFrame:
    """``table`` read from a running server's call-log route (``RuntimeError`` naming what failed)."""
    import urllib.error
    import urllib.request

    route = {"serve_calls": "calls", "serve_exchanges": "exchanges"}[table]
    request = urllib.request.Request(f"{url.rstrip('/')}/agentlab/{route}")
    if api_key:
        request.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(request, timeout=60) as resp:  # noqa: S310 - the user's own server URL
            payload = json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode("utf-8", "replace")[:200]
        raise RuntimeError(f"{url}: HTTP {exc.code} reading {table}: {detail}") from None
    except (urllib.error.URLError, OSError, json.JSONDecodeError) as exc:
        raise RuntimeError(f"{url}: cannot read {table}: {exc}") from None
    columns = {"serve_calls": CALL_COLUMNS, "serve_exchanges": EXCHANGE_COLUMNS}[table]
    frame = pd.DataFrame(payload.get("data") or [], columns=[name for name, _ in columns])
    return frame


def _table(source: Any, table: str, url: str | None = None, api_key: str | None = None) -> pd.DataFrame:
    """``table`` of a serve database, oldest first: from a running server (a handle in this process,
    or its base ``url``), its store, or a file.

    A database without ``serve_calls`` is not the server's (``ValueError``); one written before a
    newer table existed gives that table empty.
    """
    if url is None and isinstance(source, str) and source.startswith(("http://", "https://")):
        url = source
    if url is not None:
        return _from_url(url, table, api_key)
    if source is None:
        raise ValueError("give a serve database, a running server or url=")
    sql = f"SELECT * FROM {table} ORDER BY started_at"
    if hasattr(source, "settle") and hasattr(source, "app"):  # a ServeHandle: read through its own connection
        source.settle()
        source = source.app.store
    if hasattr(source, "query"):  # a ServeStore
        return source.query(sql)
    path = Path(source)
    if not path.exists():
        raise FileNotFoundError(f"no serve database at {path}")
    con = connect(path, read_only=True, what="serve database",
                  fix="stop the server that holds it, or read the running server instead: report --url "
                      "http://HOST:PORT/v1 (serve_calls_df(url=...) in Python)")
    try:
        tables = {r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall()}
        if "serve_calls" not in tables:
            raise ValueError(f"{path} has no serve_calls table: it is not a database written by agentlab.serve")
        if table not in tables:
            columns = {"serve_exchanges": EXCHANGE_COLUMNS}[table]
            return pd.DataFrame({name: pd.Series(dtype="object") for name, _ in columns})
        return con.execute(sql).df()
    finally:
        con.close()


def serve_calls_df(source: Any = None, *, url: str | None = None, api_key: str | None = None) -> pd.DataFrame:
    """Every call, oldest first, with derived columns.

    ``source`` is a database path, a running :class:`~agentlab.serve.ServeHandle` or its store;
    or ``url`` (``http://127.0.0.1:8000/v1``, with ``api_key`` when the server asks for one) reads
    a server running anywhere while it holds its database (with keys: the caller's tenant's calls).
    Added: ``saved_tokens``, ``saved_pct``, ``cache_loss_tokens``, ``uncached_client_tokens``,
    ``uncached_upstream_tokens``, ``proxy_ms`` (latency not spent waiting for the upstream).
    """
    df = _table(source, "serve_calls", url, api_key).copy()
    ints = ["client_prompt_tokens", "upstream_prompt_tokens", "client_prefix_tokens", "upstream_prefix_tokens"]
    for column in ints:
        df[column] = df[column].fillna(0).astype("int64")
    df["saved_tokens"] = df["client_prompt_tokens"] - df["upstream_prompt_tokens"]
    df["saved_pct"] = (100.0 * df["saved_tokens"] / df["client_prompt_tokens"].where(df["client_prompt_tokens"] > 0)).round(1)
    df["cache_loss_tokens"] = (df["client_prefix_tokens"] - df["upstream_prefix_tokens"]).clip(lower=0)
    df["uncached_client_tokens"] = df["client_prompt_tokens"] - df["client_prefix_tokens"]
    df["uncached_upstream_tokens"] = df["upstream_prompt_tokens"] - df["upstream_prefix_tokens"]
    df["proxy_ms"] = df["latency_ms"] - df["upstream_ms"]
    return df


def serve_exchanges_df(source: Any = None, *, url: str | None = None, api_key: str | None = None) -> pd.DataFrame:
    """Every tool call the server ran itself (the arm's recall tools), oldest first: the call it
    belongs to (``call_id``, a ``serve_calls`` row), its round, tool, arguments, the result that went
    upstream and its tokens (``result_tokens``), latency and error. ``source`` as for :func:`serve_calls_df`.
    """
    return _table(source, "serve_exchanges", url, api_key)


def savings_df(source: Any = None, by: Sequence[str] = ("arm", "tenant", "conversation_id"), *,
               url: str | None = None, api_key: str | None = None) -> pd.DataFrame:
    """Per group (default: arm, tenant and conversation, so two callers' conversations that share an
    id stay apart): calls, tokens sent and saved, and the cache beside them. ``source``, ``url``
    and ``api_key`` as for :func:`serve_calls_df`.

    Token sums cover the answered client calls (status 200). ``net_saved_uncached`` is the saving
    once the prefix cache is taken into account (uncached client tokens minus uncached upstream
    tokens): it can be smaller than ``saved_tokens``, or negative, when the rewriting breaks the
    cached prefix. ``summary_tokens`` are what the arm's mechanisms spent upstream (prompt +
    completion of the rows of purpose ``summary`` and ``projection``), a cost the savings have to pay for.
    ``recall_exchanges`` and ``recall_tokens`` count the tool calls the server ran itself (recall)
    and the tokens of their results, which went upstream on top of ``upstream_tokens``.
    """
    calls = serve_calls_df(source, url=url, api_key=api_key)
    exchanges = serve_exchanges_df(source, url=url, api_key=api_key)
    keys = list(by)
    mechanism_calls = calls["purpose"].isin(MECHANISM_PURPOSES)
    summaries = calls[mechanism_calls]
    summary_tokens = (summaries.assign(tokens=summaries["usage_prompt_tokens"] + summaries["usage_completion_tokens"])
                      .groupby(keys, dropna=False)["tokens"].sum().rename("summary_tokens"))
    df = calls[~mechanism_calls]
    ok = df[df["status"] == 200]
    grouped = ok.groupby(keys, dropna=False)
    out = grouped.agg(
        calls=("call_id", "count"),
        client_tokens=("client_prompt_tokens", "sum"),
        upstream_tokens=("upstream_prompt_tokens", "sum"),
        saved_tokens=("saved_tokens", "sum"),
        usage_prompt_tokens=("usage_prompt_tokens", "sum"),
        usage_cached_tokens=("usage_cached_tokens", "sum"),
        cache_loss_tokens=("cache_loss_tokens", "sum"),
        uncached_client=("uncached_client_tokens", "sum"),
        uncached_upstream=("uncached_upstream_tokens", "sum"),
        recall_rounds=("recall_rounds", "sum"),
        p50_latency_ms=("latency_ms", "median"),
        p50_proxy_ms=("proxy_ms", "median"),
    )
    failed = df[df["status"] != 200].groupby(keys, dropna=False)["call_id"].count().rename("failed_calls")
    ran = exchanges.merge(calls[["call_id", *[k for k in keys if k in calls.columns and k != "call_id"]]],
                          on="call_id", how="inner", suffixes=("_exchange", ""))
    ran = ran.assign(result_tokens=pd.to_numeric(ran["result_tokens"]).fillna(0))
    recall = ran.groupby(keys, dropna=False).agg(recall_exchanges=("call_id", "count"),
                                                  recall_tokens=("result_tokens", "sum"))
    out = out.join(failed, how="outer").join(summary_tokens, how="left").join(recall, how="left")
    out = out.fillna({"failed_calls": 0, "calls": 0, "summary_tokens": 0, "recall_exchanges": 0, "recall_tokens": 0})
    for column in ("failed_calls", "calls", "summary_tokens", "recall_exchanges", "recall_tokens"):
        out[column] = out[column].astype("int64")
    out["saved_pct"] = (100.0 * out["saved_tokens"] / out["client_tokens"].where(out["client_tokens"] > 0)).round(1)
    out["cache_hit_pct"] = (100.0 * out["usage_cached_tokens"]
                            / out["usage_prompt_tokens"].where(out["usage_prompt_tokens"] > 0)).round(1)
    out["net_saved_uncached"] = out["uncached_client"] - out["uncached_upstream"]
    columns = ["calls", "failed_calls", "client_tokens", "upstream_tokens", "saved_tokens", "saved_pct",
               "cache_loss_tokens", "net_saved_uncached", "summary_tokens", "usage_prompt_tokens", "usage_cached_tokens",
               "cache_hit_pct", "recall_rounds", "recall_exchanges", "recall_tokens", "p50_latency_ms",
               "p50_proxy_ms"]
    return out[columns].reset_index()
