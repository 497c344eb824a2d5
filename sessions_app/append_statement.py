"""The statement behind `message_append`: one append as one SQL statement per vendor.

The statement takes the next seq from the session row and inserts the message at once,
so it is atomic on its own: on PostgreSQL an `UPDATE … RETURNING` feeding the INSERT
(the UPDATE holds the session's row lock until commit); on SQLite an `INSERT … SELECT
last_seq + 1`, whose write lock is taken before it reads, with the trigger of migration
0003 advancing last_seq. Nothing is written when the session is not active (no row comes
back) or the external id was stored before (the unique index refuses it).

The SQL and the adapters of the inserted values are prepared once per vendor (the ORM's
query compiler and per-field dispatch cost more than the SQL itself), and the statement
runs through Django's cursor like any query: errors are Django's, and debug query logging
and `django_assert_num_queries` see every append.

SQLite drops a table's triggers when Django rebuilds it, so the `last_seq` trigger is
checked at startup (`trigger_missing`, a database system check of this app).
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime
from datetime import timezone as dt_timezone
from typing import Any

from django.conf import settings
from django.db import models, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Field
from django.utils.dateparse import parse_datetime

from qorven.runtime.database import migration_recorded
from tenancy.models import Membership, Tenant

from .errors import LeaseLost, SenderLeft, WorkspaceSuspended
from .models import Message, Session

_ACTIVE = Session.State.ACTIVE.value


def append_execute(
    db: BaseDatabaseWrapper, *, session_id: int, values: dict[str, Any]
) -> tuple[int, int, datetime] | None:
    """Append one message (`values`: its column values by attname, all but id and seq;
    `created_at` None for the statement's own time) to the active session `session_id`;
    return the new row's (id, seq, created_at), or None when the session is not active.

    Outside an atomic block the statement is a transaction of its own. In a caller's
    block, a message with a platform id runs in a savepoint, so a duplicate the unique
    index refuses leaves the caller's transaction usable (message_append then returns the
    stored one); without one nothing is caught, so no savepoint is spent on it (its two
    statements were a third of an API POST's round trips).
    """
    plan = append_plan(db)
    params = _adapted(plan, values)
    where = [session_id, _ACTIVE]
    params = where + params if plan.session_first else params + where
    sql = plan.sql
    rider = _rider.get()
    ridden = (rider is not None and rider.armed and not rider.fired and plan.ridden_head != ""
              and values["external_id"] == rider.external_id and values["external_scope"] == rider.external_scope)
    if ridden:
        sql = plan.ridden_head + rider.sql + _RIDDEN_TAIL  # type: ignore[union-attr]
        params += rider.params  # type: ignore[union-attr]
    if plan.named:  # SQLite: Django maps %(pN)s to :pN with one format, not a regex over the statement
        params = dict(zip(plan.named, params))
    if db.in_atomic_block and values["external_id"]:
        with transaction.atomic(using=db.alias):
            row = _execute(db, sql, params)
    else:
        row = _execute(db, sql, params)
    if ridden and row is not None:
        rider.fired = True  # type: ignore[union-attr]
    return row


@dataclass
class AppendRider:
    """A write that rides the append of one message, on PostgreSQL: `sql`, an `UPDATE …
    WHERE …` (with `%s` parameters, `params`), runs in the statement that appends the
    message with this platform id (external_scope, external_id) — one round trip, one
    transaction — and only when that statement inserts it: not when the session is not
    active (rotated meanwhile: the caller appends again, to its successor) nor when the
    id was stored before (the unique index refuses the whole statement). `fired` says it
    ran. Not `armed`, or on SQLite (whose INSERT cannot carry an UPDATE), it never rides:
    its owner writes it in a statement of its own. channels_app.event_done is its user."""

    sql: str
    external_scope: str = ""
    external_id: str = ""
    params: list[Any] = field(default_factory=list)
    armed: bool = False
    fired: bool = False


_rider: ContextVar[AppendRider | None] = ContextVar("qorven_append_rider", default=None)


@contextmanager
def append_riding(rider: AppendRider) -> Iterator[AppendRider]:
    """In the block, `rider` rides the append of its message (AppendRider)."""
    token = _rider.set(rider)
    try:
        yield rider
    finally:
        _rider.reset(token)


@dataclass(frozen=True)
class AppendPlan:
    """The append statement of one vendor, with Django's `%s` placeholders, and how each
    inserted value is adapted."""

    sql: str
    columns: list[str]  # the attnames of the inserted values, in order
    adapters: list[tuple[int, Callable[[Any], Any]]]  # (position, adapter) of those not sent as is
    session_first: bool  # the session's id and state come before the values
    named: tuple[str, ...] = ()  # parameter names, where the statement names its parameters
    # PostgreSQL: the append of a turn's reply, which also confirms and extends the turn's
    # lease and marks the message it answers (reply_execute), stored only while the
    # session's workspace is served (serving_condition); its parameters: the lease's new
    # end, the answered seq, the session's id and state, the owner, the answered state and
    # the answered message's id, then the values.
    reply_sql: str = ""
    # The same, stored only while the session's person is still a member (member_condition).
    member_reply_sql: str = ""
    # PostgreSQL: the append with the INSERT as a WITH of its own, followed by a rider's
    # UPDATE (AppendRider) and _RIDDEN_TAIL; its parameters come after the append's.
    ridden_head: str = ""


_plans: dict[str, AppendPlan] = {}  # by vendor


def append_plan(db: BaseDatabaseWrapper) -> AppendPlan:
    plan = _plans.get(db.vendor)
    if plan is not None:
        return plan
    mark = "%s"  # Django's cursor takes this style on every backend
    quote = db.ops.quote_name
    # A new row has no revision (NULL): the trigger gives it one when the row is updated.
    fields = [f for f in Message._meta.concrete_fields if not f.primary_key and f.attname != "revision"]
    columns = ", ".join(quote(f.column) for f in fields)
    # The time is read by the statement itself, once it holds the session's lock (the
    # UPDATE on PostgreSQL, SQLite's write lock taken before the statement runs): later
    # seqs never get earlier times. A time given by the caller (imports) is kept.
    now = "clock_timestamp()" if db.vendor == "postgresql" else "strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now')"
    values = ", ".join(
        "allocated.seq" if f.attname == "seq" else f"COALESCE({mark}, {now})" if f.attname == "created_at" else mark
        for f in fields
    )
    inserted = [f for f in fields if f.attname != "seq"]
    sessions, messages = quote(Session._meta.db_table), quote(Message._meta.db_table)
    returning = f"RETURNING {quote('id')}, {quote('seq')}, {quote('created_at')}"
    reply_sql = member_reply_sql = ridden_head = ""
    if db.vendor == "postgresql":
        insert = f"INSERT INTO {messages} ({columns}) SELECT {values} FROM allocated {returning}"
        allocate = (f"WITH allocated AS (UPDATE {sessions} SET last_seq = last_seq + 1"
                    f" WHERE id = {mark} AND state = {mark} RETURNING last_seq AS seq)")
        sql = f"{allocate} {insert}"
        # The rider's UPDATE sees the INSERT's returned row only when there is one.
        ridden_head = f"{allocate}, inserted AS ({insert}), ridden AS ("
        def reply(held: str) -> str:
            return (
                f"WITH allocated AS (UPDATE {sessions} SET last_seq = last_seq + 1, turn_lease_until = {mark},"
                f" replied_through_seq = GREATEST(replied_through_seq, {mark})"
                f" WHERE id = {mark} AND state = {mark} AND {held} RETURNING last_seq AS seq),"
                f" marked AS (UPDATE {messages} SET answer_state = {mark} WHERE id = {mark}"
                f" AND EXISTS (SELECT 1 FROM allocated)) {insert}"
            )

        reply_sql = reply(f"turn_owner = {mark} AND {serving_condition(db)}")
        member_reply_sql = reply(f"turn_owner = {mark} AND {member_condition(db)}")
    else:
        sql = (
            f"INSERT INTO {messages} ({columns}) SELECT {values}"
            f" FROM (SELECT last_seq + 1 AS seq FROM {sessions} WHERE id = {mark} AND state = {mark}) AS allocated"
            f" {returning}"
        )
    named: tuple[str, ...] = ()
    if db.vendor == "sqlite":
        parts = sql.split("%s")
        named = tuple(f"p{i}" for i in range(len(parts) - 1))
        sql = "".join(part + (f"%({named[i]})s" if i < len(named) else "") for i, part in enumerate(parts))
    plan = _plans[db.vendor] = AppendPlan(
        sql=sql,
        columns=[f.attname for f in inserted],
        adapters=[(i, adapt) for i, f in enumerate(inserted) if (adapt := _adapter(f, db)) is not None],
        session_first=db.vendor == "postgresql",
        named=named,
        reply_sql=reply_sql,
        member_reply_sql=member_reply_sql,
        ridden_head=ridden_head,
    )
    return plan


_RIDDEN_TAIL = ' AND EXISTS (SELECT 1 FROM inserted)) SELECT "id", "seq", "created_at" FROM inserted'


def member_condition(db: BaseDatabaseWrapper) -> str:
    """SQL for the WHERE of a statement on the session row: true while the session's person
    is an active member of its tenant and the workspace is served (as
    tenancy.selectors.memberships_holding reads it). Folded into the statement that stores
    a turn's reply, so a person removed, or whose workspace the host suspended, while the
    model thought gets nothing, for three index lookups (the membership's unique (tenant,
    user) index, the user's and the tenant's primary keys) and no round trip of its own."""
    quote = db.ops.quote_name
    sessions = quote(Session._meta.db_table)
    users = quote(Session._meta.get_field("user").related_model._meta.db_table)
    return (
        f"EXISTS (SELECT 1 FROM {quote(Membership._meta.db_table)} m JOIN {users} u ON u.id = m.user_id"
        f" JOIN {quote(Tenant._meta.db_table)} t ON t.id = m.tenant_id"
        f" WHERE m.tenant_id = {sessions}.tenant_id AND m.user_id = {sessions}.user_id AND u.is_active"
        f" AND t.suspended_at IS NULL)"
    )


def serving_condition(db: BaseDatabaseWrapper) -> str:
    """SQL for the WHERE of a statement on the session row: true while the session's
    workspace is served (tenancy.access.tenant_serving, as it is now). Folded into the
    statement that stores any turn's reply (a group's, an anonymous visitor's: replies
    that answer no member), so nothing the model wrote after the host suspended the
    workspace is stored or sent."""
    quote = db.ops.quote_name
    sessions = quote(Session._meta.db_table)
    return (f"EXISTS (SELECT 1 FROM {quote(Tenant._meta.db_table)} t"
            f" WHERE t.id = {sessions}.tenant_id AND t.suspended_at IS NULL)")


def reply_condition(db: BaseDatabaseWrapper, *, member: bool) -> str:
    """What a turn's reply is stored under, besides its lease: the person still a member
    (`member`), else the workspace served."""
    return member_condition(db) if member else serving_condition(db)


def reply_execute(
    db: BaseDatabaseWrapper, *, session_id: int, values: dict[str, Any], owner: str, lease_until: Any,
    answers_id: int, answers_seq: int, member: bool = False,
) -> tuple[int, int, datetime] | None:
    """PostgreSQL: append a turn's reply (as append_execute) in the statement that also
    confirms `owner`'s lease on the session and extends it to `lease_until`, marks message
    `answers_id` answered and moves the session's progress past `answers_seq` — one round
    trip, a transaction of its own outside an atomic block. Raises LeaseLost when the lease
    is no longer `owner`'s; WorkspaceSuspended when the host suspended the workspace; with
    `member`, SenderLeft when the session's person is no longer a member of its tenant
    (nothing is written); returns None when the session is not active."""
    plan = append_plan(db)
    if not plan.reply_sql:
        raise ValueError(f"{db.vendor} stores a reply in a transaction of the caller's (sessions_app.turn_writes)")
    params = _adapted(plan, values)
    head = [lease_until, answers_seq, session_id, _ACTIVE, owner, Message.Answer.ANSWERED, answers_id]
    row = _execute(db, plan.member_reply_sql if member else plan.reply_sql, head + params)
    if row is None:
        reply_refusal(db, session_id=session_id, owner=owner, member=member)
    return row


def reply_refusal(db: BaseDatabaseWrapper, *, session_id: int, owner: str, member: bool) -> None:
    """Why a reply's statement stored nothing (read only then, never for a reply stored):
    LeaseLost when the lease is no longer `owner`'s, WorkspaceSuspended when the workspace
    is suspended, SenderLeft when `member` was asked and the session's person is no longer
    one; else it returns (the session is not active)."""
    sessions = db.ops.quote_name(Session._meta.db_table)
    with db.cursor() as cursor:
        cursor.execute(f"SELECT turn_owner, {serving_condition(db)}, {member_condition(db) if member else 'NULL'}"
                       f" FROM {sessions} WHERE id = %s", [session_id])
        found = cursor.fetchone()
    if found is None or found[0] != owner:
        raise LeaseLost(session_id)
    if not found[1]:
        raise WorkspaceSuspended(session_id)
    if member and not found[2]:
        raise SenderLeft(session_id)


def _adapted(plan: AppendPlan, values: dict[str, Any]) -> list[Any]:
    """The inserted values in the statement's order, each as the database takes it."""
    params = [values[name] for name in plan.columns]
    for i, adapt in plan.adapters:
        params[i] = adapt(params[i])
    return params


def _execute(db: BaseDatabaseWrapper, sql: str, params: list[Any]) -> tuple[int, int, datetime] | None:
    with db.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    return None if row is None else (row[0], row[1], _stored_time(db, row[2]))


def _stored_time(db: BaseDatabaseWrapper, value: Any) -> datetime:
    """The created_at the statement returned, as the ORM would read it back."""
    if isinstance(value, datetime):
        return value if value.utcoffset() is not None or not settings.USE_TZ else value.replace(tzinfo=dt_timezone.utc)
    parsed = parse_datetime(str(value))
    if parsed is None:
        raise ValueError(f"the database returned an unreadable time: {value!r}")
    return parsed.replace(tzinfo=dt_timezone.utc) if settings.USE_TZ and parsed.utcoffset() is None else parsed


TRIGGER = "message_advances_session_last_seq"
TRIGGER_MIGRATION = "0003_message_advances_last_seq"  # the migration that first creates it


def trigger_missing(db: BaseDatabaseWrapper) -> bool:
    """True on SQLite when the trigger advancing `last_seq` is gone (a migration rebuilt
    the messages table without creating it again): every second append of a session
    would then fail on its seq. A database not migrated that far has none to miss: an
    install upgraded from before 0003 has the messages table without it until `qorven
    migrate`, which runs this check first, adds it."""
    if db.vendor != "sqlite":
        return False
    if not migration_recorded(db, app="sessions_app", name=TRIGGER_MIGRATION):
        return False
    with db.cursor() as cursor:
        cursor.execute("SELECT 1 FROM sqlite_master WHERE type = 'trigger' AND name = %s", [TRIGGER])
        return cursor.fetchone() is None


def _adapter(field: Field, db: BaseDatabaseWrapper) -> Callable[[Any], Any] | None:
    """How one column's value is written: as is for text, integers and booleans (None), the backend's
    own adapter for JSON and aware datetimes, and the field's full preparation for anything
    else (a naive datetime is made aware, with Django's warning, as `save()` would)."""
    if isinstance(field, models.JSONField):
        encoder = field.encoder
        return lambda value: None if value is None else db.ops.adapt_json_value(value, encoder)
    if isinstance(field, (models.CharField, models.TextField, models.IntegerField, models.ForeignKey,
                          models.BooleanField)):
        return None
    prepare: Callable[[Any], Any] = lambda value: field.get_db_prep_save(value, db)  # noqa: E731
    if isinstance(field, models.DateTimeField) and settings.USE_TZ:
        adapt = db.ops.adapt_datetimefield_value
        return lambda value: (
            adapt(value) if isinstance(value, datetime) and value.utcoffset() is not None else prepare(value)
        )
    return prepare
