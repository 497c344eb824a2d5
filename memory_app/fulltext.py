"""Full-text search over memories, per database.

PostgreSQL: a stored, generated `search_vector` column (`to_tsvector('english', …)` of the
memory's search text, plus one lexeme naming the owner) with a GIN index, made by
migrations 0002, 0003 and 0008 and invisible to the Django model (a generated column
cannot be declared for SQLite too). SQLite: an FTS5 table keyed by the memory's id,
holding an owner token and the search text, written by the memory services. Either way
the owner is part of the index, so a search reads only that owner's postings. The
vocabulary (terms, stop words, owner token, how unspaced letters are spaced out) is
shared with history search: sessions_app.fulltext.

Chinese, Japanese and Thai are written without spaces, and both databases take a run of
such letters for one word ("我喜欢寿司"), so no word inside it could be found. The search
text spaces those letters out, one token each (`search_text`), and a query asks for
each pair of adjacent letters as a phrase (`memory_terms`): "寿司" finds "我喜欢寿司" on
both databases alike, with no tokenizer the database would have to load. An Arabic word
is found with the article or a one-letter conjunction or preposition written onto it
("مدرسة" finds "المدرسة"), as history search finds it (sessions_app.fulltext.arabic_stems).
"""
from __future__ import annotations

from sessions_app.fulltext import (
    HANGUL_WORD,
    MAX_TERMS,
    PG_CONFIG,
    STOPWORDS,
    UNSPACED_LETTER,
    UNSPACED_RUN,
    arabic_forms,
    fold,
    korean_prefixes,
    korean_syllables,
    letter_groups,
    owner_token,
    scan_finds,
    search_terms,
    search_text,
)

__all__ = ["FTS_TABLE", "HANGUL_WORD", "arabic_forms", "korean_prefixes", "MAX_TERMS", "PG_CONFIG", "STOPWORDS", "UNSPACED_LETTER", "fold", "fts5_query",
           "memory_terms", "owner_token", "pg_owner_tsquery", "scan_finds", "search_terms",
           "search_text"]

FTS_TABLE = "memory_app_memory_fts"


def memory_terms(text: str) -> list[str]:
    """What a memory search looks for in a person's `text`, at most MAX_TERMS.

    Words of space-separated languages as sessions_app.fulltext.search_terms gives them.
    A run of Chinese, Japanese or Thai has no spaces to tell its words, and a message is
    often one long run ("我最喜欢的寿司店在哪里"), so it gives every pair of adjacent
    letters as a phrase ("寿 司"), matched as neighbours in the index: a memory sharing a
    two-letter word with the message matches it, one sharing more ranks higher. A Korean
    word of one syllable is searched when the message has no other word. A lone
    letter is searched by itself only when the message has no pair: one asked for alone
    (猫) is a word, one between English words (Alice的passport) mostly grammar, and it
    would match nearly every memory in its language. Pairs of hiragana alone are mostly
    grammar too (です, ます), so a long message keeps them last.
    """
    words = search_terms(UNSPACED_RUN.sub(" ", text))
    if not words and not UNSPACED_RUN.search(text):
        # A Korean word of one syllable (집, 책), searched when asked alone: beside longer
        # words it is mostly grammar (이, 그, 저) and would match most Korean memories.
        words = korean_syllables(text)
    pairs: dict[str, None] = {}
    lone: dict[str, None] = {}
    for run in UNSPACED_RUN.findall(text):
        for group in letter_groups(run):
            if len(group) == 1:
                lone.setdefault(group[0], None)
            for first, second in zip(group, group[1:]):
                pairs.setdefault(f"{first} {second}", None)
    if not pairs and not lone:
        return words
    grams = sorted(pairs or lone, key=_kana_only)  # stable: in the message's order otherwise
    # Neither kind crowds out the other: each keeps half the terms when both are many.
    grams = grams[:max(MAX_TERMS - len(words), MAX_TERMS // 2)]
    return words[:MAX_TERMS - len(grams)] + grams


def _kana_only(gram: str) -> bool:
    return all("\u3041" <= c <= "\u309f" for c in gram if c != " ")


def pg_owner_tsquery(*, tenant_id: int, qor_id: int, user_id: int | None) -> str:
    """The tsquery text naming an owner's lexeme in PostgreSQL's `search_vector`
    (migration 0003): quoted, because it holds spaces, which no parsed word ever does."""
    return f"'owner {tenant_id} {qor_id} {user_id if user_id is not None else 'x'}'"


def fts5_query(*, owner: str, terms: list[str]) -> str:
    """An FTS5 MATCH expression: the owner's memories containing any of `terms`.

    Every term is a quoted string (a quote inside doubled), so nothing the user typed is
    read as FTS5 syntax (AND, NEAR, column filters, `*`); a term of several tokens ("寿 司")
    is a phrase, its tokens next to each other; a Korean word is the start of a word ("서울"
    finds "서울에서", the word with its particle) or of an inner part of one (korean_prefixes);
    an Arabic word with a prefix is itself or the word without it (arabic_forms).
    """
    if not terms:
        raise ValueError("no terms to search for")
    quoted = " OR ".join(" OR ".join(f'"{prefix}"*' for prefix in korean_prefixes(t)) if HANGUL_WORD.fullmatch(t)
                         else " OR ".join('"' + f.replace('"', '""') + '"' for f in arabic_forms(t)) for t in terms)
    return f'owner : "{owner}" AND content : ({quoted})'
