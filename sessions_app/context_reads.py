"""What a model may see of a conversation: the reads behind a prompt's message window and
the compaction point's. Each takes the session, already obtained through a tenant-scoped
selector; one range scan of the (session, seq) index each, filtered in the database."""
from __future__ import annotations

from typing import Any

from django.db import connection

from .models import Message, Session
from .selectors import MessageRow, message_rows_read, metadata_has_key

# The metadata key of the tool rounds stored for a message that failed (marked by
# sessions_app.services.answers.message_answer_fail): out of every later prompt, as the message is,
# until /retry makes it wait for its answer again.
FAILED_ROUND = "failed_round"


def context_read(
    *, session: Session, floor_seq: int, answering_seq: int, before_seq: int | None = None, limit: int = 64
) -> list[MessageRow]:
    """The newest `limit` messages a model may see when answering message `answering_seq`,
    oldest first: after the compaction point `floor_seq`, before `before_seq`, without
    user messages that arrived later and are not answered yet (they get their own turns),
    notices, commands,
    answers written again (superseded) and messages the model refused or that never fit
    (sending those again with every later message would only fail those too). The
    filtering happens in the database, so a long backlog of skipped rows never reaches
    Python; one range scan of the (session, seq) index, read as rows, not model instances.
    The rows' `created_at` is None: a prompt has no use for it, and making a datetime of
    it was a third of reading a full window's rows."""
    where, params = _context_where(session, floor_seq, answering_seq)
    if before_seq is not None:
        where.append("seq < %s")
        params.append(before_seq)
    rows = message_rows_read(f"WHERE {' AND '.join(where)} ORDER BY seq DESC LIMIT %s", [*params, limit], session.pk,
                      dated=False)
    rows.reverse()
    return rows


def context_versions(*, session: Session, floor_seq: int, low_seq: int, high_seq: int) -> list[tuple[int, int | None]]:
    """The id and revision of each message from `low_seq` to `high_seq` that a context read
    (as context_read, for a message after `high_seq`) returns, oldest first: one range scan
    that reads no text. Equal to those of rows read earlier, the rows are what the database
    holds now (a message updated since has moved its revision on; one that joined or left
    what a context read returns changes the ids)."""
    where, params = _context_where(session, floor_seq, high_seq)
    where.append("seq BETWEEN %s AND %s")
    params += [low_seq, high_seq]
    table = connection.ops.quote_name(Message._meta.db_table)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT id, revision FROM {table} WHERE {' AND '.join(where)} ORDER BY seq", params)
        return [(pk, revision) for pk, revision in cursor.fetchall()]


def _context_where(session: Session, floor_seq: int, answering_seq: int) -> tuple[list[str], list[Any]]:
    # A later user message answered already (before a /retry or an edit of this one) is
    # conversation like its answer, which would otherwise be read without its question.
    where = ["session_id = %s", "seq > %s",
             "NOT (role = 'user' AND seq > %s AND (answer_state IS NULL OR answer_state <> 'answered'))",
             "(answer_state IS NULL OR answer_state <> 'failed')"]
    params: list[Any] = [session.pk, floor_seq, answering_seq]
    # A failed message's tool rounds go with it (FAILED_ROUND).
    for key in ("notice", "command", "superseded", FAILED_ROUND):
        sql, param = metadata_has_key(key)
        where.append(f"NOT {sql}")
        params.append(param)
    return where, params


def context_left_out(*, session: Session, floor_seq: int, answering_seq: int, limit: int = 64) -> list[MessageRow]:
    """Up to `limit` messages after the compaction point `floor_seq` that a context read
    for `answering_seq` left out or that came after it, oldest first: later messages of
    any role, and failed ones and the tool rounds stored for them (condensed, though
    never sent again); never notices,
    commands or answers written again (superseded: neither the model nor the summarizer
    reads them). With a context read that reached `floor_seq`, these are the rest of the
    conversation to be condensed (a message after `answering_seq` the read also saw is
    returned again)."""
    failed_round, param = metadata_has_key(FAILED_ROUND)
    where = ["session_id = %s", "seq > %s", f"(seq > %s OR answer_state = 'failed' OR {failed_round})"]
    params: list[Any] = [session.pk, floor_seq, answering_seq, param]
    for key in ("notice", "command", "superseded"):
        sql, param = metadata_has_key(key)
        where.append(f"NOT {sql}")
        params.append(param)
    return message_rows_read(f"WHERE {' AND '.join(where)} ORDER BY seq LIMIT %s", [*params, limit], session.pk)
