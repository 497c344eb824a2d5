"""`bulk_create(objs, ignore_conflicts=True)` as the one statement it is.

Django's `bulk_create` opens a transaction around its INSERT even for one row: outside
a caller's transaction that is a BEGIN and a COMMIT more — three round trips to the
database where one does, since a single `INSERT … ON CONFLICT DO NOTHING` is atomic on
its own. Used where that is paid on every message (a reply's delivery parts).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connections, models, router

TEXT_TYPES = ("varchar", "text", "char")


def rows_insert_new(objs: Sequence[models.Model], *, only_if: tuple[str, Sequence[Any]] | None = None,
                    along: tuple[str, Sequence[Any]] | None = None) -> int:
    """Insert `objs` (instances of one model, without primary keys), skipping each that a
    unique constraint finds stored already: one statement, in the caller's transaction if
    there is one. Fields are filled as `save()` would (`auto_now` and `auto_now_add`).
    With `only_if` (an SQL condition and its parameters: `EXISTS (…)`), nothing is
    inserted unless it holds, checked in the same statement. With `along` (an UPDATE or
    DELETE and its parameters; PostgreSQL only), that runs in the same statement too, as
    its WITH, whatever is inserted. The number of rows inserted."""
    if not objs:
        return 0
    model = type(objs[0])
    db = connections[router.db_for_write(model)]
    fields = [field for field in model._meta.concrete_fields if not field.primary_key]
    params = [field.get_db_prep_save(field.pre_save(obj, True), db) for obj in objs for field in fields]
    quote = db.ops.quote_name
    columns = ", ".join(quote(field.column) for field in fields)
    if only_if is None:
        row = "(" + ", ".join(["%s"] * len(fields)) + ")"
        sql = (f"INSERT INTO {quote(model._meta.db_table)} ({columns}) "
               f"VALUES {', '.join([row] * len(objs))} ON CONFLICT DO NOTHING")
    else:
        # Rows selected rather than given as VALUES, so a WHERE can hold them back; a
        # parameter in such a row is typed by the database as text unless cast (only what
        # is not text is: a cast to varchar(n) would cut a long value where the column
        # refuses it).
        row = _select_row(model, db)
        condition, condition_params = only_if
        sql = (f"INSERT INTO {quote(model._meta.db_table)} ({columns}) "
               f"SELECT * FROM ({' UNION ALL '.join([row] * len(objs))}) AS new_rows WHERE {condition} "
               "ON CONFLICT DO NOTHING")
        params += list(condition_params)
    if along is not None:
        if db.vendor != "postgresql":
            raise ValueError("a statement along an INSERT is PostgreSQL's (a WITH that writes)")
        along_sql, along_params = along
        sql, params = f"WITH along AS ({along_sql}) {sql}", [*along_params, *params]
    with db.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount


_select_rows: dict[tuple[type[models.Model], str], str] = {}


def _select_row(model: type[models.Model], db: Any) -> str:
    """`SELECT %s, %s::bigint, …` for a row of `model`, worked out once per database
    vendor (a field's type is most of the Python a planning spent)."""
    key = (model, db.vendor)
    row = _select_rows.get(key)
    if row is None:
        fields = [field for field in model._meta.concrete_fields if not field.primary_key]
        row = _select_rows[key] = "SELECT " + ", ".join(_placeholder(field, db) for field in fields)
    return row


def _placeholder(field: models.Field, db: Any) -> str:
    if db.vendor != "postgresql" or str(field.db_type(db)).startswith(TEXT_TYPES):
        return "%s"
    return f"%s::{field.cast_db_type(db)}"
