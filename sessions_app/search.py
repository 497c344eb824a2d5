"""Full-text search over what a person and their Qor said (the chat page's history search).

PostgreSQL: the GIN expression index of migration 0005 (`to_tsvector('english', content)`
on user and assistant rows), which the query repeats word for word so the planner uses it
with the (session, seq) index for the owner's sessions. SQLite: the FTS5 table of the
same migration, kept by triggers and keyed by the session's owner, so a search reads only
that owner's postings. Every word typed must occur (stemmed, stop words dropped), newest
first. The owner is checked on the rows too: an index can never cross people.
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.contrib.auth.models import User
from django.db import connection
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import BooleanField
from django.db.models.expressions import RawSQL

from .fulltext import PG_CONFIG, owner_token, search_terms
from tenancy.models import Qor, Tenant

from .migrations._trigger import SEARCH_TABLE, SEARCH_TRIGGERS
from .models import Message, Session

SEARCH_LIMIT = 50


@dataclass(frozen=True)
class SearchHit:
    session_id: int
    seq: int
    role: str
    channel: str
    content: str
    created_at: datetime
    active: bool  # in the conversation going on now, not an archived one


def message_search(
    *, tenant: Tenant, qor: Qor, user: User, query: str, limit: int = SEARCH_LIMIT
) -> list[SearchHit]:
    """The user's messages with this Qor, and its replies to them, across the canonical
    conversation and the archived ones, that contain every word of `query`; newest first.
    Replies the person had written again (regenerate) are left out."""
    terms = search_terms(query)
    if not terms or qor.tenant_id != tenant.pk or limit <= 0:
        return []
    sessions = Session.objects.filter(tenant=tenant, qor=qor, user=user, kind=Session.Kind.CANONICAL)
    rows = Message.objects.filter(session__in=sessions, role__in=[Message.Role.USER, Message.Role.ASSISTANT])
    rows = rows.exclude(content="").exclude(metadata__has_key="superseded").exclude(metadata__has_key="command")
    if connection.vendor == "postgresql":
        # The expression of the index, word for word; the words are a parameter.
        rows = rows.filter(RawSQL(
            f"to_tsvector('{PG_CONFIG}'::regconfig, {Message._meta.db_table}.content)"
            f" @@ plainto_tsquery('{PG_CONFIG}', %s)", [" ".join(terms)], output_field=BooleanField(),
        ))
    elif connection.vendor == "sqlite":
        owner = owner_token(tenant_id=tenant.pk, qor_id=qor.pk, user_id=user.pk)
        words = " AND ".join('"' + t.replace('"', '""') + '"' for t in terms)  # quoted: never FTS5 syntax
        rows = rows.filter(id__in=RawSQL(f"SELECT rowid FROM {SEARCH_TABLE} WHERE {SEARCH_TABLE} MATCH %s",
                                         [f'owner : "{owner}" AND content : ({words})']))
    else:  # another database: a scan of the owner's rows, for correctness only
        for term in terms:
            rows = rows.filter(content__icontains=term)
    found = rows.select_related("session").order_by("-created_at", "-id")[:limit]
    return [
        SearchHit(session_id=m.session_id, seq=m.seq, role=m.role, channel=m.channel, content=m.content,
                  created_at=m.created_at, active=m.session.state == Session.State.ACTIVE)
        for m in found
    ]


def search_triggers_missing(db: BaseDatabaseWrapper) -> list[str]:
    """On SQLite, the search triggers of migration 0005 that are gone (a migration rebuilt
    the messages table): messages written since are missing from search."""
    if db.vendor != "sqlite":
        return []
    with db.cursor() as cursor:
        cursor.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name = %s", [SEARCH_TABLE])
        if cursor.fetchone() is None:
            return []  # not migrated that far yet
        cursor.execute("SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = %s",
                       [Message._meta.db_table])
        present = {name for (name,) in cursor.fetchall()}
    return [name for name in SEARCH_TRIGGERS if name not in present]
