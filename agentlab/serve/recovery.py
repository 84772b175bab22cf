"""Bringing the serve tables back in line with the ledger after a crash (run when the store opens).

The proxy's ledger (the session service's ``sessions`` and ``events``) and its own index
(``serve_conversations``, ``serve_prefixes``) are committed by two writers, a few hundred
milliseconds apart. A ``kill -9`` in between leaves a ledger the index does not know: a
conversation whose session exists without its ``serve_conversations`` row (its next turn would try
to create the session again and fail), a conversation that moved to a new session (a branch) with
its row still naming the old one, or ledger events whose prefixes are not indexed (the client's
next request would start a new conversation and copy its history into it). :func:`reconcile`
repairs all three from the ledger, which is the source of truth:

* each conversation's row names its latest session (a session is ``<conversation id>`` or
  ``<conversation id>~<8 hex digits>`` for a branch, so the conversation is read off its id);
* every ledger event of a current session that was appended after the call log's last committed
  row, less :data:`RECENT_MARGIN` seconds, has its prefix row (older ones were committed with
  that call log; the bound keeps the start-up cost to the last minutes' sessions).

Both are idempotent (a clean file changes nothing).
"""

from __future__ import annotations

import logging

import duckdb

from agentlab.duckdb_files import transaction

log = logging.getLogger(__name__)

#: The session service's ``app_name`` of every proxy conversation.
APP_NAME = "agentlab-serve"
#: Seconds before the call log's last row from which ledger events get their prefix rows checked.
RECENT_MARGIN = 600.0

_LATEST_SESSIONS = r"""
    WITH serve_sessions AS (
        SELECT user_id AS tenant, session_id, created_at,
               regexp_replace(session_id, '~[0-9a-f]{8}$', '') AS conversation_id
        FROM sessions WHERE app_name = ?),
    latest AS (
        SELECT tenant, conversation_id, arg_max(session_id, created_at) AS session_id,
               max(created_at) AS created_at
        FROM serve_sessions GROUP BY tenant, conversation_id)
    SELECT l.tenant, l.conversation_id, l.session_id, l.created_at
    FROM latest l LEFT JOIN serve_conversations c USING (tenant, conversation_id)
    WHERE c.session_id IS NULL OR c.session_id <> l.session_id
"""

_MISSING_PREFIXES = r"""
    INSERT INTO serve_prefixes
    SELECT tenant, chain_hash, conversation_id, length FROM (
        SELECT c.tenant, c.conversation_id, json_extract_string(e.event_json, '$.metadata.chain') AS chain_hash,
               row_number() OVER (PARTITION BY e.user_id, e.session_id ORDER BY e.seq)::INTEGER AS length
        FROM events e JOIN serve_conversations c ON c.tenant = e.user_id AND c.session_id = e.session_id
        WHERE e.app_name = ? AND json_extract_string(e.event_json, '$.metadata.chain') IS NOT NULL
          AND (e.user_id, e.session_id) IN (
              SELECT (user_id, session_id) FROM sessions WHERE app_name = ? AND updated_at >= ?))
    ON CONFLICT DO NOTHING
"""


def reconcile(con: duckdb.DuckDBPyConnection) -> tuple[int, int]:
    """Repair ``serve_conversations`` and ``serve_prefixes`` from the ledger (see the module docstring):
    (conversation rows written, prefix rows added). Nothing to do when the file holds no ledger yet.
    """
    tables = {row[0] for row in con.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_name IN ('sessions', 'events')").fetchall()}
    if tables != {"sessions", "events"}:
        return 0, 0
    with transaction(con):
        moved = con.execute(_LATEST_SESSIONS, [APP_NAME]).fetchall()
        for tenant, conversation_id, session_id, created_at in moved:
            con.execute("INSERT INTO serve_conversations VALUES (?, ?, ?, 'recovered', ?) ON CONFLICT "
                        "(tenant, conversation_id) DO UPDATE SET session_id = excluded.session_id",
                        [tenant, conversation_id, session_id, created_at])
        row = con.execute("SELECT max(started_at + coalesce(latency_ms, 0) / 1000) FROM serve_calls").fetchone()
        since = float("-inf") if row is None or row[0] is None else float(row[0]) - RECENT_MARGIN
        before = _count(con, "serve_prefixes")
        con.execute(_MISSING_PREFIXES, [APP_NAME, APP_NAME, since])
        added = _count(con, "serve_prefixes") - before
    if moved or added:
        log.warning("recovered after an unclean stop: %d conversation rows and %d prefix rows rebuilt from the "
                    "ledger", len(moved), added)
    return len(moved), added


def _count(con: duckdb.DuckDBPyConnection, table: str) -> int:
    row = con.execute(f"SELECT count(*) FROM {table}").fetchone()
    return int(row[0]) if row is not None else 0
