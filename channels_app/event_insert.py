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
binding's is, not stored and answered later (nor, for a deleted one, a foreign key error
failing its whole batch).
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
        cursor.execute(_sql(db), [document, *shared])
        returned = cursor.fetchall()
        ids = {(binding_id, external_id): pk for pk, binding_id, external_id in returned if pk is not None}
        if db.vendor == "postgresql":  # the statement names the bindings it refused (an id of None)
            return Inserted(ids, frozenset(binding_id for pk, binding_id, _ in returned if pk is None))
        # SQLite's RETURNING has only the rows inserted: a row skipped is a repeat or a binding
        # refused, told apart by a read only then (a platform's retry, or a binding just disabled).
        skipped = {(row[0], row[1]) for row in rows if (row[1], row[2]) not in ids}
        if not skipped:
            return Inserted(ids, frozenset())
        enabled = set(ChannelBinding.objects.using(db.alias).filter(
            tenant_id__in={tenant for tenant, _ in skipped}, pk__in={b for _, b in skipped}, enabled=True,
        ).values_list("pk", flat=True))
        skipped_bindings = {b for _, b in skipped}
        return Inserted(ids, frozenset(skipped_bindings - enabled))


def _sql(db: BaseDatabaseWrapper) -> str:
    return _STATEMENTS.get(db.vendor) or _STATEMENTS.setdefault(db.vendor, _statement(db))


_STATEMENTS: dict[str, str] = {}


def _statement(db: BaseDatabaseWrapper) -> str:
    quote, vendor = db.ops.quote_name, db.vendor
    columns = ", ".join(quote(InboundEvent._meta.get_field(name).column) for name in (*_PER_ROW, *_SHARED))
    table = quote(InboundEvent._meta.db_table)
    bindings, enabled = quote(ChannelBinding._meta.db_table), quote(ChannelBinding._meta.get_field("enabled").column)
    if vendor == "postgresql":
        rows = "SELECT * FROM jsonb_to_recordset(%s::jsonb) AS r(n int, t bigint, b bigint, e text, s text, p jsonb)"
    elif vendor == "sqlite":
        rows = ("SELECT key AS n, json_extract(value, '$.t') AS t, json_extract(value, '$.b') AS b, "
                "json_extract(value, '$.e') AS e, json_extract(value, '$.s') AS s, json_extract(value, '$.p') AS p "
                "FROM json_each(%s)")
    else:
        raise NotImplementedError(f"no inbound event statement for {vendor}")
    bound = f"EXISTS (SELECT 1 FROM {bindings} AS c WHERE c.id = r.b AND c.{enabled})"
    insert = (f"INSERT INTO {table} ({columns}) SELECT r.t, r.b, r.e, r.s, r.p, %s, %s, %s, %s, %s FROM r "
              f"WHERE {bound} ORDER BY r.n ON CONFLICT DO NOTHING RETURNING id, binding_id, external_id")
    if vendor == "sqlite":  # no INSERT within WITH: what it skipped is read after (events_insert)
        return f"WITH r AS ({rows}) {insert}"
    # The bindings refused come back with the rows stored, an id of None: no second round trip.
    return (f"WITH r AS ({rows}), stored AS ({insert}) SELECT id, binding_id, external_id FROM stored "
            f"UNION ALL SELECT DISTINCT NULL::bigint, r.b, NULL FROM r WHERE NOT {bound}")
