"""Reads of long-term memory, always scoped to (tenant, qor, user)."""
from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import TYPE_CHECKING, NamedTuple

from django.contrib.auth.models import User
from django.db import connection
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Exists, OuterRef, Q

from qorven.runtime.database import migration_recorded
from qorven.runtime.prepared_read import PreparedRead
from qorven.runtime.row_cache import RowCache
from tenancy.models import Qor, Tenant
from tenancy.trust import trust_allows

from .fulltext import (
    FTS_TABLE,
    HANGUL_WORD,
    PG_CONFIG,
    arabic_forms,
    fts5_query,
    korean_prefixes,
    memory_terms,
    owner_token,
    pg_owner_tsquery,
    scan_finds,
)
from .models import LearnedSkill, Memory

if TYPE_CHECKING:
    from django.db.models import QuerySet

_MEMORY_COLUMNS = [f.column for f in Memory._meta.concrete_fields]
# PostgreSQL ranks at most this many memories per query word (see _search_postgres).
CANDIDATES_PER_TERM = 500


def memory_search(
    *, tenant: Tenant, qor: Qor, user: User | None, query: str, limit: int = 5,
    types: Collection[str] = (), ignoring: Collection[str] = (), done_before: datetime | None = None,
) -> list[Memory]:
    """The memories of this user with this Qor that best match `query`, best first.

    The database's full-text search: PostgreSQL ranks with `ts_rank` (what Django's
    SearchRank emits) over the stored `search_vector` (GIN-indexed), SQLite with FTS5's bm25. A memory matches when it
    contains any of the query's words (stemmed, stop words dropped; a Korean word at the
    start of one, with its particle; an Arabic word with or without its prefix) or, in Chinese, Japanese and Thai, any two
    neighbouring letters of it (memory_app.fulltext.memory_terms);
    more and rarer words rank higher, newest first among equals. Never crosses tenant,
    Qor or user: the owner columns are filtered on every database (and SQLite's index is
    keyed by owner too). `types`: only memories of these types (empty: any); `ignoring`:
    case-folded words not searched for; `done_before`: reminders that reached the person
    before then are left out (their ranks go to others).
    """
    if qor.tenant_id != tenant.pk or limit <= 0:
        return []
    terms = [t for t in memory_terms(query) if t not in ignoring]
    if not terms:
        return []
    user_id = user.pk if user is not None else None
    kinds = _Kinds(sorted(set(types)), done_before)
    if connection.vendor == "postgresql":
        return _search_postgres(tenant.pk, qor.pk, user_id, terms, limit, kinds)
    if connection.vendor == "sqlite":
        return _search_sqlite(tenant.pk, qor.pk, user_id, terms, limit, kinds)
    return _search_scan(tenant.pk, qor.pk, user_id, terms, limit, kinds)


def memories_held(*, tenant: str, qor: str, user: str) -> Exists:
    """To annotate a read with (the outer query's field paths to the tenant, Qor and user
    ids): whether this person has any memory with this Qor — one look in the owner index
    (memory_owner_idx), read fresh with a row the caller reads anyway. A turn whose person
    has none makes no search (qorven.agent.retrieval.memories_for)."""
    return Exists(Memory.objects.filter(tenant_id=OuterRef(tenant), qor_id=OuterRef(qor), user_id=OuterRef(user))
                  .order_by())


def memories_related(*, tenant: Tenant, qor: Qor, user: User, content: str, exclude: Collection[int] = (),
                     limit: int = 3) -> list[Memory]:
    """The person's notes (facts, lessons, reminders) that share the key words of
    `content`, best first, but those in `exclude`: the ones a new note may correct. The
    words of the person's own name are no key words (most of their notes hold them)."""
    names = memory_terms(" ".join((user.first_name, user.last_name, user.username)))
    found = memory_search(tenant=tenant, qor=qor, user=user, query=content, limit=limit + len(exclude),
                          types=(Memory.Type.FACT, Memory.Type.LESSON, Memory.Type.REMINDER), ignoring=set(names))
    return [m for m in found if m.pk not in exclude][:limit]


class _Kinds(NamedTuple):
    """Which of the owner's memories a search reads: of these types (empty: any), but
    the reminders done (delivered) before `done_before`."""

    types: list[str]
    done_before: datetime | None

    def sql(self, alias: str) -> tuple[str, list[object]]:
        """The clause (after the WHERE's others) and its parameters."""
        sql = ""
        params: list[object] = [*self.types]
        if self.types:
            sql += f" AND {alias}.type IN ({', '.join(['%s'] * len(self.types))})"
        if self.done_before is not None:
            sql += (f" AND NOT ({alias}.type = %s AND {alias}.period_end IS NOT NULL"
                    f" AND {alias}.period_end <= %s)")
            params += [Memory.Type.REMINDER, self.done_before]
        return sql, params

    def filtered(self, memories: QuerySet[Memory]) -> QuerySet[Memory]:
        if self.types:
            memories = memories.filter(type__in=self.types)
        if self.done_before is not None:
            memories = memories.exclude(type=Memory.Type.REMINDER, period_end__lte=self.done_before)
        return memories


def _owned(tenant_id: int, qor_id: int, user_id: int | None) -> QuerySet[Memory]:
    return Memory.objects.filter(tenant_id=tenant_id, qor_id=qor_id, user_id=user_id)  # type: ignore[misc]  # None: IS NULL


def _search_postgres(
    tenant_id: int, qor_id: int, user_id: int | None, terms: list[str], limit: int, kinds: _Kinds
) -> list[Memory]:
    """One statement: candidates from the GIN index, ranked by `ts_rank` (what Django's
    SearchRank emits) over the stored `search_vector`.

    The vector holds the owner as a lexeme, so each candidate lookup is `owner & word`,
    answered inside the index (and the owner can only ever match its own rows: the column
    is generated from them). Any word matches; ranking ORs one `phraseto_tsquery` per word
    (a term of two letters, "寿 司", is a phrase of neighbours, as FTS5 reads it).
    Ranking reads every candidate's vector, so candidates are gathered per word, at most
    CANDIDATES_PER_TERM each, plus those holding every word: exact for an owner with
    fewer matches than that per word (nearly everyone), and for an owner with hundreds of
    thousands of memories it bounds the work when a word is in most of them (the user's
    own name) while every memory with a rarer word, or with all of them, is still ranked.
    """
    table = Memory._meta.db_table
    queries = [_pg_tsquery(term) for term in terms]
    # numnode > 0: a word PostgreSQL drops (a stop word) gives an empty query, and
    # `owner && empty` would be the owner alone, i.e. every memory of theirs.
    per_text = (
        "(SELECT c.id FROM {table} c WHERE c.search_vector @@ (%s::tsquery && ({q})) AND numnode({q}) > 0"
        f" LIMIT {CANDIDATES_PER_TERM})"
    )
    candidates = [per_text.format(table=table, q=sql) for sql, _ in queries]
    owner = pg_owner_tsquery(tenant_id=tenant_id, qor_id=qor_id, user_id=user_id)
    params: list[object] = [param for _, param in queries]  # the ranking's query, first in the statement
    for _, param in queries:
        params += [owner, param, param]
    if len(terms) > 1:  # then those holding every word
        every = " && ".join(sql for sql, _ in queries)
        candidates.append(per_text.format(table=table, q=every))
        params += [owner, *[param for _, param in queries] * 2]
    columns = ", ".join(f"m.{connection.ops.quote_name(c)}" for c in _MEMORY_COLUMNS)
    kinds_sql, kinds_params = kinds.sql("m")
    sql = (
        f"SELECT {columns} FROM {table} m, (SELECT {' || '.join(sql for sql, _ in queries)}) AS query(q)"
        f" WHERE m.id IN ({' UNION '.join(candidates)}){kinds_sql}"
        " ORDER BY ts_rank(m.search_vector, query.q) DESC, m.created_at DESC, m.id DESC LIMIT %s"
    )
    return list(Memory.objects.raw(sql, [*params, *kinds_params, limit]))


def _pg_tsquery(term: str) -> tuple[str, str]:
    """The tsquery of one term and its parameter: a phrase of its words ("寿 司": neighbours,
    as FTS5 reads it), or a Korean word as the start of a word ("서울" finds "서울에서",
    the word with its particle) or of an inner part of one (korean_prefixes), checked to
    be Hangul alone, or an Arabic word with a prefix as itself or the word without it
    (arabic_forms), checked to be Arabic letters alone, so the syntax around it is ours."""
    if HANGUL_WORD.fullmatch(term):
        return f"to_tsquery('{PG_CONFIG}', %s)", " | ".join(f"'{prefix}':*" for prefix in korean_prefixes(term))
    if len(forms := arabic_forms(term)) > 1:
        return f"to_tsquery('{PG_CONFIG}', %s)", " | ".join(f"'{form}'" for form in forms)
    return f"phraseto_tsquery('{PG_CONFIG}', %s)", term


def _search_sqlite(
    tenant_id: int, qor_id: int, user_id: int | None, terms: list[str], limit: int, kinds: _Kinds
) -> list[Memory]:
    match = fts5_query(owner=owner_token(tenant_id=tenant_id, qor_id=qor_id, user_id=user_id), terms=terms)
    columns = ", ".join(f"m.{connection.ops.quote_name(c)}" for c in _MEMORY_COLUMNS)
    owner, owner_params = _owner_sql("m", tenant_id, qor_id, user_id)
    kinds_sql, kinds_params = kinds.sql("m")
    # CROSS JOIN keeps FTS5 as the outer loop: the match first, then each hit's row by id.
    # The owner is checked on the row too, so a stale index entry can never cross owners.
    sql = (
        f"SELECT {columns} FROM {FTS_TABLE} CROSS JOIN {Memory._meta.db_table} m ON m.id = {FTS_TABLE}.rowid"
        f" WHERE {FTS_TABLE} MATCH %s AND {owner}{kinds_sql}"
        f" ORDER BY bm25({FTS_TABLE}, 0.0, 1.0), m.created_at DESC, m.id DESC LIMIT %s"
    )
    return list(Memory.objects.raw(sql, [match, *owner_params, *kinds_params, limit]))


def _owner_sql(alias: str, tenant_id: int, qor_id: int, user_id: int | None) -> tuple[str, list[object]]:
    """The WHERE clause (and its parameters) that keeps a query to one owner's memories."""
    user = f"{alias}.user_id = %s" if user_id is not None else f"{alias}.user_id IS NULL"
    params: list[object] = [tenant_id, qor_id, *([user_id] if user_id is not None else [])]
    return f"{alias}.tenant_id = %s AND {alias}.qor_id = %s AND {user}", params


def _search_scan(
    tenant_id: int, qor_id: int, user_id: int | None, terms: list[str], limit: int, kinds: _Kinds
) -> list[Memory]:
    """Other databases: a scan of the owner's memories, each read as the index would read
    it (scan_finds), ranked by words matched."""
    scored = []
    for memory in kinds.filtered(_owned(tenant_id, qor_id, user_id)).order_by("-created_at", "-id").iterator():
        score = sum(scan_finds(memory.content, t) for t in terms)
        if score:
            scored.append((score, memory))
    scored.sort(key=lambda pair: pair[0], reverse=True)  # stable: newest first among equals
    return [m for _, m in scored[:limit]]


def memory_count(
    *, tenant: Tenant | None = None, qor: Qor | None = None, user: User | None = None
) -> int:
    """How many memories a scope holds (None = any)."""
    return memory_scope(tenant=tenant, qor=qor, user=user).count()


def memory_scope(
    *, tenant: Tenant | None = None, qor: Qor | None = None, user: User | None = None
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


# Read by every turn (compiled once: qorven.runtime.prepared_read).
_enabled_skills: PreparedRead[LearnedSkill] = PreparedRead(
    lambda tenant_id: LearnedSkill.objects.filter(Q(tenant_id=tenant_id) | Q(tenant__isnull=True), enabled=True)
    .order_by("name"),
    tenant_id=int,
)


# The enabled skills by tenant id, read by every turn and edited a few times a year: kept
# per process (qorven.runtime.row_cache) as a Qor's MCP servers are, cleared by a save or
# delete of a skill in this process (memory_app.apps), seen from another process within
# QORVEN_ROUTE_CACHE_SECONDS.
enabled_skills: RowCache[tuple[LearnedSkill, ...]] = RowCache("learned skills")


def skills_for(*, tenant: Tenant | None, trust: str) -> list[LearnedSkill]:
    """Enabled learned skills a surface of this trust may use: shared ones and the tenant's.
    A tenant's own skill hides a shared one of the same name."""
    by_name: dict[str, LearnedSkill] = {}
    # Without a tenant, the shared skills only (no tenant has id 0).
    tenant_id = tenant.pk if tenant is not None else 0
    for skill in enabled_skills.get(tenant_id, lambda: tuple(_enabled_skills.all(tenant_id=tenant_id))) or ():
        if skill.name not in by_name or skill.tenant_id is not None:
            by_name[skill.name] = skill
    return [s for s in by_name.values() if trust_allows(trust, s.min_trust)]


def skill_get(*, tenant: Tenant, trust: str, name: str) -> LearnedSkill | None:
    """One skill this surface may use, by name; None when missing, disabled or not allowed."""
    return next((s for s in skills_for(tenant=tenant, trust=trust) if s.name == name), None)


def delete_trigger_missing(db: BaseDatabaseWrapper) -> bool:
    """On SQLite, whether migration 0005's trigger is gone (a migration rebuilt the
    memories table): memories deleted since leave their text in the search index. A
    database not migrated that far has none to miss: an install upgraded from before 0005
    has the search table of 0002 without it until `qorven migrate`, which runs this check
    first, adds it."""
    from .migrations._trigger import DELETE_MIGRATION, DELETE_TRIGGER

    if db.vendor != "sqlite":
        return False
    if not migration_recorded(db, app="memory_app", name=DELETE_MIGRATION):
        return False
    with db.cursor() as cursor:
        cursor.execute("SELECT 1 FROM sqlite_master WHERE type = 'trigger' AND name = %s AND tbl_name = %s",
                       [DELETE_TRIGGER, Memory._meta.db_table])
        return cursor.fetchone() is None


def memories_of_person(
    *, tenant: Tenant, user: User, qor: Qor | None = None, after_id: int = 0, limit: int = 500
) -> list[Memory]:
    """The person's own memories in `tenant` (with `qor` only, when given), by id after
    `after_id`; not the Qor's notes that belong to nobody (user empty)."""
    qs = Memory.objects.filter(tenant=tenant, user=user, pk__gt=after_id)
    if qor is not None:
        qs = qs.filter(qor=qor)
    return list(qs.select_related("qor").order_by("pk")[:limit])
