"""Full-text search vocabulary shared by the memory selectors and services.

PostgreSQL: a stored, generated `search_vector` column (`to_tsvector('english', content)`
plus one lexeme naming the owner) with a GIN index, made by migrations 0002-0003 and
invisible to the Django model (a generated column cannot be declared for SQLite too).
SQLite: an FTS5 table keyed by the memory's id, holding an owner token and the content,
written by the memory services. Either way the owner is part of the index, so a search
reads only that owner's postings.

This module holds no SQL that touches rows; it turns a user's text into search terms and
an FTS5 query, safely.
"""
from __future__ import annotations

import re

# Used by the PostgreSQL generated column and every tsquery: they must agree.
PG_CONFIG = "english"
FTS_TABLE = "memory_app_memory_fts"
# Enough words to find a memory from a long message, few enough to keep the query cheap.
MAX_TERMS = 16

_WORD = re.compile(r"\w+", re.UNICODE)

# PostgreSQL's `english` stop words, so FTS5 (which has none) drops the same words from a
# query and "what is my laptop" searches for "laptop" on both databases.
STOPWORDS = frozenset(
    """
    i me my myself we our ours ourselves you your yours yourself yourselves he him his
    himself she her hers herself it its itself they them their theirs themselves what which
    who whom this that these those am is are was were be been being have has had having do
    does did doing a an the and but if or because as until while of at by for with about
    against between into through during before after above below to from up down in out on
    off over under again further then once here there when where why how all any both each
    few more most other some such no nor not only own same so than too very s t can will
    just don should now
    """.split()
)


def search_terms(text: str) -> list[str]:
    """The distinct, case-folded words of `text` worth searching for, at most MAX_TERMS.

    Stop words and one-letter words are dropped. A long text keeps its longest words,
    which are the rarer, more telling ones, in their original order.
    """
    seen: dict[str, None] = {}
    for word in _WORD.findall(text.casefold()):
        word = word.strip("_")
        if len(word) > 1 and word not in STOPWORDS:
            seen.setdefault(word, None)
    words = list(seen)
    if len(words) > MAX_TERMS:
        keep = set(sorted(words, key=len, reverse=True)[:MAX_TERMS])
        words = [w for w in words if w in keep][:MAX_TERMS]
    return words


def owner_token(*, tenant_id: int, qor_id: int, user_id: int | None) -> str:
    """One indexed FTS5 token naming a memory's (tenant, qor, user), so a search reads only
    that owner's postings. Letters and digits only: the tokenizer keeps it whole."""
    return f"t{tenant_id}q{qor_id}u{user_id if user_id is not None else 'x'}"


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
