"""The statement behind `message_append`: one append as one SQL statement per vendor.

The statement takes the next seq from the session row and inserts the message at once,
so it is atomic on its own: on PostgreSQL an `UPDATE … RETURNING` feeding the INSERT
(the UPDATE holds the session's row lock until commit); on SQLite an `INSERT … SELECT
last_seq + 1`, whose write lock is taken before it reads, with the trigger of migration
0003 advancing last_seq. Nothing is written when the session is not active (no row comes
back) or the external id was stored before (the unique index refuses it).

It runs on the driver's cursor, prepared once per vendor: the ORM's query compiler,
cursor wrappers and per-field dispatch cost more than the SQL itself. Errors still come
out as Django's; debug query logging does not see the statement.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import models, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Field

from .models import Message, Session

_ACTIVE = Session.State.ACTIVE.value


def append_execute(db: BaseDatabaseWrapper, *, session_id: int, values: dict[str, Any]) -> tuple[int, int] | None:
    """Append one message (`values`: its column values by attname, all but id and seq) to
    the active session `session_id`; return the new row's (id, seq), or None when the
    session is not active.

    In a caller's atomic block the statement runs in a savepoint, so a refused duplicate
    leaves the caller's transaction usable; otherwise it is a transaction of its own.
    """
    plan = append_plan(db)
    params = [values[name] for name in plan.columns]
    for i, adapt in plan.adapters:
        params[i] = adapt(params[i])
    where = [session_id, _ACTIVE]
    params = where + params if plan.session_first else params + where
    if db.in_atomic_block:
        with transaction.atomic(using=db.alias):
            return _execute(db, plan.sql, params)
    db.close_if_health_check_failed()  # what Django does before making a cursor
    db.ensure_connection()
    return _execute(db, plan.sql, params)


@dataclass(frozen=True)
class AppendPlan:
    """The append statement of one vendor, in its driver's parameter style, and how each
    inserted value is adapted."""

    sql: str
    columns: list[str]  # the attnames of the inserted values, in order
    adapters: list[tuple[int, Callable[[Any], Any]]]  # (position, adapter) of those not sent as is
    session_first: bool  # the session's id and state come before the values


_plans: dict[str, AppendPlan] = {}  # by vendor


def append_plan(db: BaseDatabaseWrapper) -> AppendPlan:
    plan = _plans.get(db.vendor)
    if plan is not None:
        return plan
    mark = "?" if db.Database.paramstyle == "qmark" else "%s"
    quote = db.ops.quote_name
    fields = [f for f in Message._meta.concrete_fields if not f.primary_key]
    columns = ", ".join(quote(f.column) for f in fields)
    values = ", ".join("allocated.seq" if f.attname == "seq" else mark for f in fields)
    inserted = [f for f in fields if f.attname != "seq"]
    sessions, messages = quote(Session._meta.db_table), quote(Message._meta.db_table)
    returning = f"RETURNING {quote('id')}, {quote('seq')}"
    if db.vendor == "postgresql":
        sql = (
            f"WITH allocated AS (UPDATE {sessions} SET last_seq = last_seq + 1"
            f" WHERE id = {mark} AND state = {mark} RETURNING last_seq AS seq)"
            f" INSERT INTO {messages} ({columns}) SELECT {values} FROM allocated {returning}"
        )
    else:
        sql = (
            f"INSERT INTO {messages} ({columns}) SELECT {values}"
            f" FROM (SELECT last_seq + 1 AS seq FROM {sessions} WHERE id = {mark} AND state = {mark}) AS allocated"
            f" {returning}"
        )
    plan = _plans[db.vendor] = AppendPlan(
        sql=sql,
        columns=[f.attname for f in inserted],
        adapters=[(i, adapt) for i, f in enumerate(inserted) if (adapt := _adapter(f, db)) is not None],
        session_first=db.vendor == "postgresql",
    )
    return plan


def _execute(db: BaseDatabaseWrapper, sql: str, params: list[Any]) -> tuple[int, int] | None:
    with db.wrap_database_errors:
        cursor = db.connection.cursor()
        try:
            cursor.execute(sql, params)
            row = cursor.fetchone()
        finally:
            cursor.close()
    return None if row is None else (row[0], row[1])


def _adapter(field: Field, db: BaseDatabaseWrapper) -> Callable[[Any], Any] | None:
    """How one column's value is written: as is for text and integers (None), the backend's
    own adapter for JSON and aware datetimes, and the field's full preparation for anything
    else (a naive datetime is made aware, with Django's warning, as `save()` would)."""
    if isinstance(field, models.JSONField):
        encoder = field.encoder
        return lambda value: None if value is None else db.ops.adapt_json_value(value, encoder)
    if isinstance(field, (models.CharField, models.TextField, models.IntegerField, models.ForeignKey)):
        return None
    prepare: Callable[[Any], Any] = lambda value: field.get_db_prep_save(value, db)  # noqa: E731
    if isinstance(field, models.DateTimeField) and settings.USE_TZ:
        adapt = db.ops.adapt_datetimefield_value
        return lambda value: (
            adapt(value) if isinstance(value, datetime) and value.utcoffset() is not None else prepare(value)
        )
    return prepare
