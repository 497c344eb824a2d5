"""`bulk_create(objs, ignore_conflicts=True)` as the one statement it is.

Django's `bulk_create` opens a transaction around its INSERT even for one row: outside
a caller's transaction that is a BEGIN and a COMMIT more — three round trips to the
database where one does, since a single `INSERT … ON CONFLICT DO NOTHING` is atomic on
its own. Used where that is paid on every message (a reply's delivery parts).
"""
from __future__ import annotations

from collections.abc import Sequence

from django.db import connections, models, router


def rows_insert_new(objs: Sequence[models.Model]) -> None:
    """Insert `objs` (instances of one model, without primary keys), skipping each that a
    unique constraint finds stored already: one statement, in the caller's transaction if
    there is one. Fields are filled as `save()` would (`auto_now` and `auto_now_add`)."""
    if not objs:
        return
    model = type(objs[0])
    db = connections[router.db_for_write(model)]
    fields = [field for field in model._meta.concrete_fields if not field.primary_key]
    params = [field.get_db_prep_save(field.pre_save(obj, True), db) for obj in objs for field in fields]
    quote = db.ops.quote_name
    row = "(" + ", ".join(["%s"] * len(fields)) + ")"
    sql = (f"INSERT INTO {quote(model._meta.db_table)} ({', '.join(quote(field.column) for field in fields)}) "
           f"VALUES {', '.join([row] * len(objs))} ON CONFLICT DO NOTHING")
    with db.cursor() as cursor:
        cursor.execute(sql, params)
