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

A row is stored only if its binding is enabled as the statement runs: a webhook is screened
against the process's cache of bindings (qorven.runtime.row_cache), which may still hold a
binding switched off or deleted since, by this process a moment ago or by another one
seconds ago. Checked in the same statement, such a webhook is refused as a disabled
binding's is, instead of stored, answered 200 and left for its task to skip (or, for a
deleted binding, failing its whole batch on the foreign key).
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

from .models import ChannelBinding, InboundEvent

# Per row, in the JSON array: t(enant), b(inding), e(xternal id), s(ender), p(ayload).
_PER_ROW = ("tenant", "binding", "external_id", "sender_id", "payload")
_SHARED = ("state", "result", "error", "created_at", "updated_at")


@dataclass(frozen=True)
class Inserted:
    ids: dict[tuple[int, int | str], int]  # the new events' ids by (binding id, external id)
    refused: frozenset[int]  # the bindings disabled or gone: nothing of theirs stored


def events_insert(db: BaseDatabaseWrapper, rows: Sequence[tuple[int, int, str, str, Any]], *, now: datetime) -> Inserted:
    """Insert new pending events — `rows` of (tenant id, binding id, external id, sender id,
    payload), ids given in this order — skipping any whose (binding, external id) is stored
    already or comes earlier in `rows`, and any whose binding is not enabled (or is gone)."""
    document = json.dumps([{"n": n, "t": t, "b": b, "e": e, "s": s, "p": p} for n, (t, b, e, s, p) in enumerate(rows)])
    shared = [
        InboundEvent._meta.get_field(name).get_db_prep_save(value, db)
        for name, value in zip(_SHARED, (InboundEvent.State.PENDING.value, "", "", now, now))
    ]
    with db.cursor() as cursor:
        if db.vendor == "postgresql":  # the statement names the bindings it refused (an id of None)
            bindings = sorted({row[1] for row in rows})
            cursor.execute(_sql(db), [bindings, *shared, document, bindings])
            returned = cursor.fetchall()
            ids = {(binding_id, external_id): pk for pk, binding_id, external_id in returned if pk is not None}
            return Inserted(ids, frozenset(binding_id for pk, binding_id, _ in returned if pk is None))
        cursor.execute(_sql(db), [document, *shared])
        ids = {(binding_id, external_id): pk for pk, binding_id, external_id in cursor.fetchall()}
    # SQLite's RETURNING has only the rows inserted: a row skipped is a repeat or a binding
    # refused, told apart by a read only then (a platform's retry, or a binding just disabled).
    skipped = {(row[0], row[1]) for row in rows if (row[1], row[2]) not in ids}
    if not skipped:
        return Inserted(ids, frozenset())
    enabled = set(ChannelBinding.objects.using(db.alias).filter(
        tenant_id__in={tenant for tenant, _ in skipped}, pk__in={b for _, b in skipped}, enabled=True,
    ).values_list("pk", flat=True))
    return Inserted(ids, frozenset({b for _, b in skipped} - enabled))


def _sql(db: BaseDatabaseWrapper) -> str:
    return _STATEMENTS.get(db.vendor) or _STATEMENTS.setdefault(db.vendor, _statement(db))


_STATEMENTS: dict[str, str] = {}


def _statement(db: BaseDatabaseWrapper) -> str:
    quote, vendor = db.ops.quote_name, db.vendor
    columns = ", ".join(quote(InboundEvent._meta.get_field(name).column) for name in (*_PER_ROW, *_SHARED))
    table = quote(InboundEvent._meta.db_table)
    bindings, enabled = quote(ChannelBinding._meta.db_table), quote(ChannelBinding._meta.get_field("enabled").column)
    insert = f"INSERT INTO {table} ({columns}) SELECT r.t, r.b, r.e, r.s, r.p, %s, %s, %s, %s, %s"
    returning = "ORDER BY r.n ON CONFLICT DO NOTHING RETURNING id, binding_id, external_id"
    if vendor == "postgresql":
        # The batch's few bindings are looked up once, by primary key (`ok`), and those not
        # enabled come back with the rows stored, an id of None: no second round trip.
        return (f"WITH ok AS (SELECT c.id FROM {bindings} AS c WHERE c.id = ANY(%s::bigint[]) AND c.{enabled}), "
                f"stored AS ({insert} FROM jsonb_to_recordset(%s::jsonb) "
                "AS r(n int, t bigint, b bigint, e text, s text, p jsonb) "
                f"WHERE r.b IN (SELECT id FROM ok) {returning}) "
                "SELECT id, binding_id, external_id FROM stored UNION ALL "
                "SELECT NULL::bigint, w.b, NULL FROM unnest(%s::bigint[]) AS w(b) WHERE w.b NOT IN (SELECT id FROM ok)")
    if vendor == "sqlite":  # no INSERT within WITH there: what it skipped is read after (events_insert)
        return (f"WITH r AS (SELECT key AS n, json_extract(value, '$.t') AS t, json_extract(value, '$.b') AS b, "
                "json_extract(value, '$.e') AS e, json_extract(value, '$.s') AS s, json_extract(value, '$.p') AS p "
                f"FROM json_each(%s)) {insert} FROM r "
                f"WHERE EXISTS (SELECT 1 FROM {bindings} AS c WHERE c.id = r.b AND c.{enabled}) {returning}")
    raise NotImplementedError(f"no inbound event statement for {vendor}")
