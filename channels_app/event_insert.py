"""The statement behind `inbound_store`: a batch of received messages as one INSERT whose
rows arrive in one JSON parameter.

A batch of webhooks is stored together (channels_app.webhook_ingest), so the statement's
size follows the batch. Written as `VALUES (…), (…)` it had ten parameters a row: the
driver rewrote the placeholders of each new statement afresh (psycopg caches that only
for statements of up to 50 parameters), adapted every value on its own, and Django
prepared every field of every row — more of a webhook's CPU than the rest of its storing.
Here the SQL is the same for every batch: the rows are one JSON array the database takes
apart (`jsonb_to_recordset` on PostgreSQL, `json_each` on SQLite), and what every row
shares (state, times) is a parameter once.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

from .models import InboundEvent

# Per row, in the JSON array: t(enant), b(inding), e(xternal id), s(ender), p(ayload).
_PER_ROW = ("tenant", "binding", "external_id", "sender_id", "payload")
_SHARED = ("state", "result", "error", "created_at", "updated_at")


def events_insert(
    db: BaseDatabaseWrapper, rows: Sequence[tuple[int, int, str, str, Any]], *, now: datetime
) -> dict[tuple[int, int | str], int]:
    """Insert new pending events — `rows` of (tenant id, binding id, external id, sender id,
    payload), ids given in this order — skipping any whose (binding, external id) is stored
    already or comes earlier in `rows`. Returns the new ids by (binding id, external id)."""
    document = json.dumps([{"n": n, "t": t, "b": b, "e": e, "s": s, "p": p} for n, (t, b, e, s, p) in enumerate(rows)])
    shared = [
        InboundEvent._meta.get_field(name).get_db_prep_save(value, db)
        for name, value in zip(_SHARED, (InboundEvent.State.PENDING.value, "", "", now, now))
    ]
    with db.cursor() as cursor:
        cursor.execute(_sql(db), [*shared, document])
        return {(binding_id, external_id): pk for pk, binding_id, external_id in cursor.fetchall()}


def _sql(db: BaseDatabaseWrapper) -> str:
    return _STATEMENTS.get(db.vendor) or _STATEMENTS.setdefault(db.vendor, _statement(db))


_STATEMENTS: dict[str, str] = {}


def _statement(db: BaseDatabaseWrapper) -> str:
    quote, vendor = db.ops.quote_name, db.vendor
    columns = ", ".join(quote(InboundEvent._meta.get_field(name).column) for name in (*_PER_ROW, *_SHARED))
    if vendor == "postgresql":
        source = ("SELECT r.t, r.b, r.e, r.s, r.p, %s, %s, %s, %s, %s "
                  "FROM jsonb_to_recordset(%s::jsonb) AS r(n int, t bigint, b bigint, e text, s text, p jsonb) "
                  "ORDER BY r.n")
    elif vendor == "sqlite":  # WHERE true: SQLite reads ON CONFLICT after a bare SELECT as a join's ON
        source = ("SELECT json_extract(value, '$.t'), json_extract(value, '$.b'), json_extract(value, '$.e'), "
                  "json_extract(value, '$.s'), json_extract(value, '$.p'), %s, %s, %s, %s, %s "
                  "FROM json_each(%s) WHERE true ORDER BY key")
    else:
        raise NotImplementedError(f"no inbound event statement for {vendor}")
    table = quote(InboundEvent._meta.db_table)
    return f"INSERT INTO {table} ({columns}) {source} ON CONFLICT DO NOTHING RETURNING id, binding_id, external_id"
