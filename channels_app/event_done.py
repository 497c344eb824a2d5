"""An inbound event marked done by the statement that stores its message.

Once a platform message is in the conversation its event is done: on PostgreSQL that
UPDATE rides the message's append (sessions_app.append_statement.AppendRider), one round
trip where two were. It runs only if the message is inserted: a session rotated meanwhile
stores nothing on the first try (the message goes to its successor, and the event is
marked with that append), and a worker that dies between the two leaves the event
claimed, so the sweeper takes it again and the message is not lost. The channel rules
say, as they hand the message on, what the event's result is once it is stored
(`event_result_if_stored`); a rider that did not fire, or a result that turned out
otherwise, is written by channels_app.receive in a statement of its own, as on SQLite.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from django.db import connection
from django.utils import timezone

from sessions_app.append_statement import AppendRider, append_riding

from .models import InboundEvent

_riders: ContextVar[AppendRider | None] = ContextVar("qorven_event_done", default=None)
_sql: dict[str, str] = {}  # by vendor


@contextmanager
def event_done_riding(*, tenant_id: int, event_id: int) -> Iterator[AppendRider]:
    """In the block (the channel rules applied to the tenant's event `event_id`), the event
    is marked done by the statement storing its message, once the rules said with what
    result. The rider comes back: `fired` when it ran, with the result it wrote as its
    first parameter."""
    sql = _sql.get(connection.vendor)
    if sql is None:
        quote = connection.ops.quote_name
        sql = _sql[connection.vendor] = (
            f"UPDATE {quote(InboundEvent._meta.db_table)} SET state = %s, result = %s, payload = '{{}}',"
            f" updated_at = %s WHERE id = %s AND tenant_id = %s")
    rider = AppendRider(sql=sql)
    rider.params = [InboundEvent.State.DONE.value, "", None, event_id, tenant_id]
    token = _riders.set(rider)
    try:
        with append_riding(rider):
            yield rider
    finally:
        _riders.reset(token)


def event_result_if_stored(result: str, *, external_scope: str, external_id: str) -> None:
    """The channel rules hand on the message with this platform id: once stored, the
    event's result is `result`, written by the statement that stores it (nothing outside
    event_done_riding)."""
    rider = _riders.get()
    if rider is None or rider.fired:
        return
    rider.external_scope, rider.external_id, rider.armed = external_scope, external_id, True
    rider.params[1], rider.params[2] = result, timezone.now()


def event_done_result(rider: AppendRider) -> str | None:
    """The result the rider wrote, or None when it did not fire."""
    return str(rider.params[1]) if rider.fired else None
