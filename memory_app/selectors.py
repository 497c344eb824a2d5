"""Reads of long-term memory, always scoped to (tenant, qor, user)."""
from __future__ import annotations

from functools import reduce
from operator import or_
from typing import TYPE_CHECKING

from django.contrib.auth.models import AbstractBaseUser
from django.contrib.postgres.search import SearchQuery, SearchRank, SearchVectorField
from django.db import connection
from django.db.models import Q
from django.db.models.expressions import RawSQL

from qorven.models import Qor, Tenant
from qorven.trust import trust_allows

from .fulltext import FTS_TABLE, PG_CONFIG, fts5_query, owner_token, search_terms
from .models import LearnedSkill, Memory

if TYPE_CHECKING:
    from django.db.models import QuerySet

_MEMORY_COLUMNS = [f.column for f in Memory._meta.concrete_fields]


def memory_search(
    *, tenant: Tenant, qor: Qor, user: AbstractBaseUser | None, query: str, limit: int = 5
) -> list[Memory]:
    """The memories of this user with this Qor that best match `query`, best first.

    The database's full-text search: PostgreSQL ranks with `ts_rank` over the stored
    `search_vector` (GIN-indexed), SQLite with FTS5's bm25. A memory matches when it
    contains any of the query's words (stemmed, stop words dropped); more and rarer words
    rank higher, newest first among equals. Never crosses tenant, Qor or user: the owner
    columns are filtered on every database (and SQLite's index is keyed by owner too).
    """
    if qor.tenant_id != tenant.pk or limit <= 0:
        return []
    terms = search_terms(query)
    if not terms:
        return []
    user_id = user.pk if user is not None else None
    if connection.vendor == "postgresql":
        return _search_postgres(tenant.pk, qor.pk, user_id, terms, limit)
    if connection.vendor == "sqlite":
        return _search_sqlite(tenant.pk, qor.pk, user_id, terms, limit)
    return _search_scan(tenant.pk, qor.pk, user_id, terms, limit)


def _owned(tenant_id: int, qor_id: int, user_id: int | None) -> QuerySet[Memory]:
    return Memory.objects.filter(tenant_id=tenant_id, qor_id=qor_id, user_id=user_id)


def _search_postgres(tenant_id: int, qor_id: int, user_id: int | None, terms: list[str], limit: int) -> list[Memory]:
    # Any word matches: one plainto_tsquery per word (each parameterised), OR-ed with `||`.
    tsquery = reduce(or_, (SearchQuery(t, config=PG_CONFIG, search_type="plain") for t in terms))
    vector = RawSQL(f"{Memory._meta.db_table}.search_vector", [], output_field=SearchVectorField())
    return list(
        _owned(tenant_id, qor_id, user_id)
        .alias(vector=vector)
        .filter(vector=tsquery)  # `search_vector @@ query`, served by the GIN index
        .annotate(rank=SearchRank(vector, tsquery))
        .order_by("-rank", "-created_at", "-id")[:limit]
    )


def _search_sqlite(tenant_id: int, qor_id: int, user_id: int | None, terms: list[str], limit: int) -> list[Memory]:
    match = fts5_query(owner=owner_token(tenant_id=tenant_id, qor_id=qor_id, user_id=user_id), terms=terms)
    columns = ", ".join(f"m.{connection.ops.quote_name(c)}" for c in _MEMORY_COLUMNS)
    user_clause = "m.user_id = %s" if user_id is not None else "m.user_id IS NULL"
    # CROSS JOIN keeps FTS5 as the outer loop: the match first, then each hit's row by id.
    sql = (
        f"SELECT {columns} FROM {FTS_TABLE} CROSS JOIN {Memory._meta.db_table} m ON m.id = {FTS_TABLE}.rowid"
        f" WHERE {FTS_TABLE} MATCH %s AND m.tenant_id = %s AND m.qor_id = %s AND {user_clause}"
        f" ORDER BY bm25({FTS_TABLE}, 0.0, 1.0), m.created_at DESC, m.id DESC LIMIT %s"
    )
    params: list[object] = [match, tenant_id, qor_id, *([user_id] if user_id is not None else []), limit]
    return list(Memory.objects.raw(sql, params))


def _search_scan(tenant_id: int, qor_id: int, user_id: int | None, terms: list[str], limit: int) -> list[Memory]:
    """Other databases: a scan of the owner's memories, ranked by words matched."""
    match = reduce(or_, (Q(content__icontains=t) for t in terms))
    candidates = list(_owned(tenant_id, qor_id, user_id).filter(match).order_by("-created_at", "-id")[:500])
    scored = [(sum(t in m.content.casefold() for t in terms), m) for m in candidates]
    scored.sort(key=lambda pair: pair[0], reverse=True)  # stable: newest first among equals
    return [m for _, m in scored[:limit]]


def memory_count(
    *, tenant: Tenant | None = None, qor: Qor | None = None, user: AbstractBaseUser | None = None
) -> int:
    """How many memories a scope holds (None = any)."""
    return memory_scope(tenant=tenant, qor=qor, user=user).count()


def memory_scope(
    *, tenant: Tenant | None = None, qor: Qor | None = None, user: AbstractBaseUser | None = None
) -> QuerySet[Memory]:
    """The memories of a tenant, a Qor or a user (any combination; no filter = all)."""
    qs = Memory.objects.all()
    if tenant is not None:
        qs = qs.filter(tenant=tenant)
    if qor is not None:
        qs = qs.filter(qor=qor)
    if user is not None:
        qs = qs.filter(user=user)
    return qs


def skills_for(*, tenant: Tenant, trust: str) -> list[LearnedSkill]:
    """Enabled learned skills a surface of this trust may use: shared ones and the tenant's.
    A tenant's own skill hides a shared one of the same name."""
    skills = LearnedSkill.objects.filter(Q(tenant=tenant) | Q(tenant__isnull=True), enabled=True).order_by("name")
    by_name: dict[str, LearnedSkill] = {}
    for skill in skills:
        if skill.name not in by_name or skill.tenant_id is not None:
            by_name[skill.name] = skill
    return [s for s in by_name.values() if trust_allows(trust, s.min_trust)]


def skill_get(*, tenant: Tenant, trust: str, name: str) -> LearnedSkill | None:
    """One skill this surface may use, by name; None when missing, disabled or not allowed."""
    return next((s for s in skills_for(tenant=tenant, trust=trust) if s.name == name), None)
