"""The set-based SQL of a collapse: rank copies, count, hand over images, move and renumber
(what names a row by its seq follows it: references.py).

Everything runs inside the database over one user's sessions, so Python never holds
their messages. Table names come from the models; values are always parameters.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.db import connection
from django.db.models import Model
from django.utils.dateparse import parse_datetime

from sessions_app.models import Image, Message


def _quoted(model: type[Model]) -> str:
    return connection.ops.quote_name(model._meta.db_table)


def _ranked(session_count: int) -> str:
    """Rows of the sessions with their rank among copies of the same (role, created_at,
    content): the canonical session's copy first, then the oldest row. Params: canonical
    id (0 for none), then the session ids."""
    ids = ", ".join(["%s"] * session_count)
    return (
        "SELECT id, session_id, seq, created_at, ROW_NUMBER() OVER ("
        " PARTITION BY role, created_at, content"
        " ORDER BY CASE WHEN session_id = %s THEN 0 ELSE 1 END, id) AS dup_rank"
        f" FROM {_quoted(Message)} WHERE session_id IN ({ids})"
    )


def rows_count(canonical_id: int, session_ids: list[int]) -> tuple[int, int]:
    """(messages, duplicates that would stay behind) over the sessions."""
    sql = (
        "SELECT COUNT(*), COALESCE(SUM(CASE WHEN dup_rank > 1 AND session_id <> %s"
        f" THEN 1 ELSE 0 END), 0) FROM ({_ranked(len(session_ids))}) AS r"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [canonical_id, canonical_id, *session_ids])
        total, duplicates = cursor.fetchone()
    return int(total), int(duplicates)


def images_of_duplicates_move(canonical_id: int, session_ids: list[int]) -> None:
    """Hand the images of copies that stay behind to the kept copy, unless it has them."""
    images, messages = _quoted(Image), _quoted(Message)
    extra = [pk for pk in session_ids if pk != canonical_id]
    marks = ", ".join(["%s"] * len(extra))
    probe = (
        f"SELECT 1 FROM {images} WHERE message_id IN"
        f" (SELECT id FROM {messages} WHERE session_id IN ({marks})) LIMIT 1"
    )
    with connection.cursor() as cursor:
        cursor.execute(probe, extra)
        if cursor.fetchone() is None:
            return
        ids = ", ".join(["%s"] * len(session_ids))
        cursor.execute(
            f"UPDATE {images} SET message_id = d.keeper FROM ("
            " SELECT id, session_id,"
            " ROW_NUMBER() OVER w AS dup_rank, FIRST_VALUE(id) OVER w AS keeper"
            f" FROM {messages} WHERE session_id IN ({ids})"
            " WINDOW w AS (PARTITION BY role, created_at, content"
            "  ORDER BY CASE WHEN session_id = %s THEN 0 ELSE 1 END, id)"
            f") AS d WHERE {images}.message_id = d.id AND d.dup_rank > 1 AND d.session_id <> %s"
            f" AND NOT EXISTS (SELECT 1 FROM {images} AS same WHERE same.message_id = d.keeper"
            f"  AND same.mime_type = {images}.mime_type AND same.size = {images}.size"
            f"  AND same.data = {images}.data)",
            [*session_ids, canonical_id, canonical_id],
        )


def kept_rows_move(canonical_id: int, session_ids: list[int], *, shift: int) -> int:
    """Re-point every kept row to the canonical session with seq = its place in
    (created_at, seq, id) order. Returns how many rows were kept.

    Unique (session, seq) is checked row by row, so when the canonical session already has
    rows they are first shifted above every seq to come (`shift`): a few rows written twice
    rather than every row, as a move-then-renumber would.
    """
    messages = _quoted(Message)
    move = (
        f"UPDATE {messages} SET session_id = %s, seq = k.new_seq FROM ("
        " SELECT id, ROW_NUMBER() OVER (ORDER BY created_at, seq, id) AS new_seq"
        f" FROM ({_ranked(len(session_ids))}) AS r WHERE r.dup_rank = 1 OR r.session_id = %s"
        f") AS k WHERE {messages}.id = k.id"
    )
    with connection.cursor() as cursor:
        if shift:
            cursor.execute(
                f"UPDATE {messages} SET seq = seq + %s WHERE session_id = %s", [shift, canonical_id]
            )
        cursor.execute(move, [canonical_id, canonical_id, *session_ids, canonical_id])
        return int(cursor.rowcount)


def session_openings(
    session_ids: list[int], *, limit: int, chars: int
) -> dict[int, list[tuple[str, str, str, datetime]]]:
    """The first `limit` messages of each session as (role, content cut to `chars`,
    channel, created_at), oldest first: one statement, an index range scan per session."""
    if not session_ids:
        return {}
    one = (
        "SELECT * FROM (SELECT session_id, seq, role, SUBSTR(content, 1, %s) AS opening,"
        f" channel, created_at FROM {_quoted(Message)} WHERE session_id = %s"
        " ORDER BY seq LIMIT %s) AS s"
    )
    params: list[Any] = []
    for pk in session_ids:
        params += [chars, pk, limit]
    result: dict[int, list[tuple[str, str, str, datetime]]] = {pk: [] for pk in session_ids}
    with connection.cursor() as cursor:
        cursor.execute(
            " UNION ALL ".join([one] * len(session_ids)) + " ORDER BY session_id, seq", params
        )
        for session_id, _, role, opening, channel, created_at in cursor.fetchall():
            result[session_id].append((role, opening, channel, _aware(created_at)))
    return result


def _aware(value: datetime | str) -> datetime:
    # Raw SQLite rows carry Django's text timestamps (naive UTC); PostgreSQL gives datetimes.
    moment = value if isinstance(value, datetime) else parse_datetime(value)
    if moment is None:
        raise ValueError(f"unreadable timestamp {value!r}")
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
