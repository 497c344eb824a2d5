"""A read the ORM compiles once per process and then runs as plain SQL.

Compiling a query is most of what a short read costs here: a `select_related` over three
tables with a subquery took ~4 ms of Python on this project's 2-CPU machine against
~0.2 ms for its SQL, and the API reads a token on every request, a turn its session. A
`PreparedRead` builds its queryset once with marker values in place of the parameters,
keeps the SQL and Django's compiled column map, and afterwards only swaps the parameters
in: rows come back as model instances exactly as the queryset would give them (the
database's converters applied, `select_related` objects attached, annotations set).

Only for reads whose shape never changes, on the default database. The statement runs
through Django's cursor, so errors are Django's and query counting sees it.
"""
from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.models import Model, QuerySet
from django.db.models.query import get_related_populators

M = TypeVar("M", bound=Model)

_INT_MARKER = -7_340_000_000_000  # far from any id or count a query would name itself

_every: weakref.WeakSet[PreparedRead[Any]] = weakref.WeakSet()  # every prepared read alive in the process


@dataclass(frozen=True)
class _Plan:
    vendor: str
    sql: str
    params: tuple[Any, ...]
    slots: tuple[tuple[int, str], ...]  # (position in params, parameter name)
    compiler: Any
    model: type[Model]
    fields: slice
    init_list: list[str]
    related: tuple[Any, ...]  # Django's populators of the select_related objects
    annotations: tuple[tuple[str, int], ...]
    converters: dict[int, Any]  # the database's converters by column, as results_iter works them out each time
    composite: bool  # a composite field among the columns: rows go through results_iter after all


class PreparedRead(Generic[M]):
    """`PreparedRead(build, digest=str)`: `build(digest=…)` returns the queryset; its
    parameters are named with their type (str or int). `.first(digest=…)` and
    `.all(digest=…)` run it."""

    def __init__(self, build: Callable[..., QuerySet[M]], **parameters: type) -> None:
        for name, kind in parameters.items():
            if kind not in (str, int):
                raise TypeError(f"parameter {name!r}: only str and int parameters can be prepared")
        self._build = build
        self._parameters = parameters
        self._plan: _Plan | None = None
        self._lock = threading.Lock()
        _every.add(self)

    def first(self, **values: Any) -> M | None:
        """The first row, or None (build the queryset with `[:1]` when more could match)."""
        plan, rows = self._run(values, many=False)
        return self._instance(plan, rows[0]) if rows else None

    def all(self, **values: Any) -> list[M]:
        plan, rows = self._run(values, many=True)
        return [self._instance(plan, row) for row in rows]

    def statement(self, **values: Any) -> tuple[str, list[Any]]:
        """The SQL and its parameters, for a statement that runs the read as a subquery
        (`… WHERE id IN (<it>)`)."""
        plan, params = self._bind(values)
        return plan.sql, params

    def _bind(self, values: dict[str, Any]) -> tuple[_Plan, list[Any]]:
        if values.keys() != self._parameters.keys():
            raise TypeError(f"expected the parameters {sorted(self._parameters)}, got {sorted(values)}")
        vendor = connections[DEFAULT_DB_ALIAS].vendor
        plan = self._plan
        if plan is None or plan.vendor != vendor:
            plan = self._prepare(vendor)
        params = list(plan.params)
        for position, name in plan.slots:
            params[position] = values[name]
        return plan, params

    def _run(self, values: dict[str, Any], *, many: bool) -> tuple[_Plan, list[Any]]:
        plan, params = self._bind(values)
        with connections[DEFAULT_DB_ALIAS].cursor() as cursor:
            cursor.execute(plan.sql, params)
            rows = cursor.fetchall() if many else [row for row in [cursor.fetchone()] if row is not None]
        if not rows:
            return plan, []
        if plan.composite:
            return plan, list(plan.compiler.results_iter([rows]))
        # The database's converters, worked out once (results_iter does it on every call:
        # a look at each column's field, most of a short read's Python).
        return plan, list(plan.compiler.apply_converters(rows, plan.converters)) if plan.converters else rows

    @staticmethod
    def _instance(plan: _Plan, row: Any) -> M:
        obj = plan.model.from_db(DEFAULT_DB_ALIAS, plan.init_list, row[plan.fields])
        for populator in plan.related:
            populator.populate(row, obj)
        for name, position in plan.annotations:
            setattr(obj, name, row[position])
        return obj  # type: ignore[return-value]

    def _prepare(self, vendor: str) -> _Plan:
        with self._lock:
            if self._plan is not None and self._plan.vendor == vendor:
                return self._plan
            markers = {name: (f"\x1fqorven-prepared-{name}\x1f" if kind is str else _INT_MARKER - i)
                       for i, (name, kind) in enumerate(self._parameters.items())}
            queryset = self._build(**markers)
            compiler = queryset.query.get_compiler(using=DEFAULT_DB_ALIAS)
            sql, params = compiler.as_sql()  # also fills compiler.select, klass_info, annotation_col_map
            slots = tuple((i, name) for i, value in enumerate(params) for name, marker in markers.items()
                          if type(value) is type(marker) and value == marker)
            missing = set(markers) - {name for _, name in slots}
            if missing:
                raise ValueError(f"the prepared query does not take {sorted(missing)} as parameters")
            columns = [column[0] for column in compiler.select[0:compiler.col_count]]
            select_fields = compiler.klass_info["select_fields"]
            fields = slice(select_fields[0], select_fields[-1] + 1)
            self._plan = _Plan(
                vendor=vendor, sql=sql, params=tuple(params), slots=slots, compiler=compiler,
                model=compiler.klass_info["model"], fields=fields,
                init_list=[column[0].target.attname for column in compiler.select[fields]],
                related=tuple(get_related_populators(compiler.klass_info, compiler.select, DEFAULT_DB_ALIAS)),
                annotations=tuple((compiler.annotation_col_map or {}).items()),
                converters=compiler.get_converters(columns), composite=compiler.has_composite_fields(columns),
            )
            return self._plan


def prepared_reads_warm(*, until: float | None = None) -> int:
    """Compile every prepared read and run it once, with parameters no row has (ids 0,
    empty strings), on this thread's connection, which it opens: a process that is about
    to serve — a worker's child before its first task — pays now what its first reads
    would (connecting, compiling each read, the database's first look at each table).
    Stops once `time.monotonic()` passes `until`. Returns how many it ran."""
    ran = 0
    for read in list(_every):
        if until is not None and time.monotonic() > until:
            break
        read.all(**{name: 0 if kind is int else "" for name, kind in read._parameters.items()})
        ran += 1
    return ran
