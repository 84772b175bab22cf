"""The tables of the DuckDB session backend and the SQL its reads and writes share.

Tables (created on first use)::

    sessions  (app_name, user_id, session_id) PK, state JSON, created_at, updated_at
    events    (app_name, user_id, session_id, seq) PK, event_id, invocation_id, author, object,
              role, filter_key, timestamp, token_count, appended_at,
              event_json (the whole Event as JSON text)
    summaries (app_name, user_id, session_id, filter_key) PK, text, updated_at, boundary JSON,
              topics JSON

``seq`` numbers a session's events 0, 1, 2 ... in append order (the primary key guards it).
``appended_at`` is when the row was committed; a session's ``updated_at`` as read back is the
later of ``sessions.updated_at`` (create, state changes) and its newest ``appended_at``, so an
append costs one INSERT and no UPDATE of the sessions row.
"""

from __future__ import annotations

import json
from typing import Any

import duckdb

from agentlab.events import Event, dumps_in_pieces
from agentlab.session.base import SessionKey, Summary, SummaryBoundary

DuckConnection = duckdb.DuckDBPyConnection

SESSION_SCHEMA = (
    """
    CREATE TABLE IF NOT EXISTS sessions (
        app_name    VARCHAR NOT NULL,
        user_id     VARCHAR NOT NULL,
        session_id  VARCHAR NOT NULL,
        state       JSON    NOT NULL,
        created_at  DOUBLE  NOT NULL,
        updated_at  DOUBLE  NOT NULL,
        PRIMARY KEY (app_name, user_id, session_id)
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS events (
        app_name      VARCHAR NOT NULL,
        user_id       VARCHAR NOT NULL,
        session_id    VARCHAR NOT NULL,
        seq           BIGINT  NOT NULL,
        event_id      VARCHAR NOT NULL,
        invocation_id VARCHAR,
        author        VARCHAR,
        object        VARCHAR,
        role          VARCHAR,
        filter_key    VARCHAR,
        timestamp     DOUBLE,
        token_count   INTEGER,
        appended_at   DOUBLE  NOT NULL,
        event_json    VARCHAR NOT NULL,
        PRIMARY KEY (app_name, user_id, session_id, seq)
    )
    """,
    """
    CREATE TABLE IF NOT EXISTS summaries (
        app_name   VARCHAR NOT NULL,
        user_id    VARCHAR NOT NULL,
        session_id VARCHAR NOT NULL,
        filter_key VARCHAR NOT NULL,
        text       VARCHAR NOT NULL,
        updated_at DOUBLE  NOT NULL,
        boundary   JSON,
        topics     JSON,
        PRIMARY KEY (app_name, user_id, session_id, filter_key)
    )
    """,
)

KEY_MATCH = "app_name = ? AND user_id = ? AND session_id = ?"

_EVENT_COLUMNS = (
    ("app_name", "VARCHAR"), ("user_id", "VARCHAR"), ("session_id", "VARCHAR"), ("seq", "BIGINT"),
    ("event_id", "VARCHAR"), ("invocation_id", "VARCHAR"), ("author", "VARCHAR"), ("object", "VARCHAR"),
    ("role", "VARCHAR"), ("filter_key", "VARCHAR"), ("timestamp", "DOUBLE"), ("token_count", "INTEGER"),
    ("appended_at", "DOUBLE"), ("event_json", "VARCHAR"),
)
_INSERT_INTO_EVENTS = f"INSERT INTO events ({', '.join(name for name, _ in _EVENT_COLUMNS)}) "
_INSERT_ONE_EVENT = _INSERT_INTO_EVENTS + f"VALUES ({', '.join(['?'] * len(_EVENT_COLUMNS))})"
# A batch goes in as one list per column: DuckDB binds 14 list parameters far faster than
# 14 x N scalar ones (measured ~3x for 100 rows), and one statement fits any batch size.
_INSERT_EVENT_COLUMNS = _INSERT_INTO_EVENTS + "SELECT " + ", ".join(
    f"unnest(?::{sql_type}[])" for _, sql_type in _EVENT_COLUMNS
)


#: Characters of event JSON beyond which a batch is inserted row by row: binding the parameters
#: holds the interpreter lock, so one statement of 60 MB held up the serve proxy's event loop
#: for a few hundred milliseconds; row by row it is given back between rows.
LARGE_BATCH_CHARS = 4 * 1024 * 1024


def event_json(event: Event) -> str:
    """``event.to_json()``, the same text, with long strings encoded in pieces
    (:func:`agentlab.events.dumps_in_pieces`): the ledger writer's thread encoding one 4 MB message
    in one call held up the serve proxy's event loop for about 100 ms.
    """
    return dumps_in_pieces(event.to_dict(), sort_keys=True)


def insert_event_rows(con: DuckConnection, rows: list[list[Any]]) -> None:
    """Insert event rows (one row bound as plain VALUES, several at once, a large batch row by row)."""
    if len(rows) == 1:
        con.execute(_INSERT_ONE_EVENT, rows[0])  # a single row binds fastest as plain VALUES
    elif sum(len(row[-1]) for row in rows) > LARGE_BATCH_CHARS:
        for row in rows:
            con.execute(_INSERT_ONE_EVENT, row)
    else:
        con.execute(_INSERT_EVENT_COLUMNS, [list(column) for column in zip(*rows, strict=True)])


def key_params(key: SessionKey) -> list[str]:
    """The session key as the parameters of :data:`KEY_MATCH`."""
    return [key.app_name, key.user_id, key.session_id]


def summary_from_row(text: str, updated_at: float, boundary: str | None, topics: str | None) -> Summary:
    """A stored summary row as a :class:`Summary`."""
    return Summary(
        text=text,
        updated_at=float(updated_at),
        boundary=SummaryBoundary.from_dict(json.loads(boundary) if boundary else None),
        topics=tuple(json.loads(topics) if topics else ()),
    )


