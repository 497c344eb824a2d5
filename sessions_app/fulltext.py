"""Full-text search vocabulary shared by history search (sessions_app.search) and memory
search (memory_app): the text search configuration, stop words, how a person's text
becomes search terms, and the owner token SQLite's FTS5 tables are keyed by. No SQL that
touches rows."""
from __future__ import annotations

import re

# Used by the PostgreSQL generated column and every tsquery: they must agree.
PG_CONFIG = "english"
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


