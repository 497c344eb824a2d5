"""Full-text search over memories, per database.

PostgreSQL: a stored, generated `search_vector` column (`to_tsvector('english', content)`
plus one lexeme naming the owner) with a GIN index, made by migrations 0002-0003 and
invisible to the Django model (a generated column cannot be declared for SQLite too).
SQLite: an FTS5 table keyed by the memory's id, holding an owner token and the content,
written by the memory services. Either way the owner is part of the index, so a search
reads only that owner's postings. The vocabulary (terms, stop words, owner token) is
shared with history search: sessions_app.fulltext.
"""
from __future__ import annotations

from sessions_app.fulltext import MAX_TERMS, PG_CONFIG, STOPWORDS, owner_token, search_terms

__all__ = ["FTS_TABLE", "MAX_TERMS", "PG_CONFIG", "STOPWORDS", "fts5_query", "owner_token", "pg_owner_tsquery",
           "search_terms"]

FTS_TABLE = "memory_app_memory_fts"


def pg_owner_tsquery(*, tenant_id: int, qor_id: int, user_id: int | None) -> str:
    """The tsquery text naming an owner's lexeme in PostgreSQL's `search_vector`
    (migration 0003): quoted, because it holds spaces, which no parsed word ever does."""
    return f"'owner {tenant_id} {qor_id} {user_id if user_id is not None else 'x'}'"


def fts5_query(*, owner: str, terms: list[str]) -> str:
    """An FTS5 MATCH expression: the owner's memories containing any of `terms`.

    Every term is a quoted string (a quote inside doubled), so nothing the user typed is
    read as FTS5 syntax (AND, NEAR, column filters, `*`).
    """
    if not terms:
        raise ValueError("no terms to search for")
    quoted = " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
    return f'owner : "{owner}" AND content : ({quoted})'
