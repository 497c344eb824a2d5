"""Full-text search over what a person and their Qor said (the chat page's history search).

PostgreSQL: the GIN expression index of migration 0010 (`to_tsvector('english',
message_search_text(content))` on user and assistant rows), which the query repeats word
for word so the planner uses it with the (session, seq) index for the owner's sessions.
SQLite: the FTS5 table of migration 0005, kept by triggers (migration 0010's index
`message_search_text(content)`) and keyed by the session's owner, so a search reads only
that owner's postings. Every word typed must occur (stemmed, stop words dropped), newest
first. The owner is checked on the rows too: an index can never cross people.

Chinese, Japanese and Thai are written without spaces, so both databases took a whole
run of their letters for one word and no word inside a sentence could be found.
`message_search_text` spaces those letters out, each its own word to the index, as
memory search does (sessions_app.fulltext.search_text). A run typed is found where it
stands as typed: the index gives the messages holding its letters (on SQLite, next to
each other), and of those, the ones holding the run itself (its katakana in either
width: "デパート" is "ﾃﾞﾊﾟｰﾄ") are found: "寿司" finds "我昨天吃了寿司". (PostgreSQL's
index cannot tell which letters are neighbours: asking it for a phrase made it compute
every candidate's words again, 75 µs a message, 20 times the cost of looking for the run
in its text.) A Korean word typed is found at the start of a word, so "스시" finds
"스시를" (the word with its particle), and of two syllables or more inside one too, so
"회의" finds "주간회의" (the index also reads the inner parts of Korean words:
sessions_app.fulltext.hangul_parts); typed with a particle, it is searched without it.
An Arabic word is found with the article or a one-letter conjunction or preposition
written onto it ("مدرسة" finds "المدرسة" and "والمدرسة"; the index also reads such a word
without it: sessions_app.fulltext.arabic_stems), and one typed with it, with or without
it, marked whole.
"""
from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import reduce
from operator import or_

from django.contrib.auth.models import User
from django.db import connection
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import BooleanField, Q, QuerySet
from django.db.models.expressions import RawSQL

from tenancy.models import Qor, Tenant

from .fulltext import (
    ARABIC_WORD,
    HANGUL_WORD,
    PG_CONFIG,
    UNSPACED_RUN,
    arabic_forms,
    arabic_prefix,
    fold,
    korean_prefixes,
    message_terms,
    owner_token,
    scan_finds,
    search_text,
    width_forms,
)
from .migrations._trigger import SEARCH_TABLE, SEARCH_TEXT_FUNCTION, SEARCH_TRIGGERS
from .models import Message, Session

SEARCH_LIMIT = 50
# What migration 0010's index holds, and what a query must repeat exactly to be served by it.
PG_VECTOR = f"to_tsvector('{PG_CONFIG}'::regconfig, {SEARCH_TEXT_FUNCTION}({Message._meta.db_table}.content))"


@dataclass(frozen=True)
class SearchHit:
    session_id: int
    seq: int
    role: str
    channel: str
    sender_name: str
    content: str
    created_at: datetime
    active: bool  # in the conversation going on now, not an archived one


def message_search(
    *, tenant: Tenant, qor: Qor, user: User, query: str, limit: int = SEARCH_LIMIT, offset: int = 0,
    channel: str = "",
) -> list[SearchHit]:
    """The user's messages with this Qor, and its replies to them, across the canonical
    conversation and the archived ones, that contain every word of `query`; newest first,
    after the `offset` newest (only those written on `channel`, when given). Replies the
    person had written again (regenerate) are left out."""
    if qor.tenant_id != tenant.pk:
        return []
    sessions = Session.objects.filter(tenant=tenant, qor=qor, user=user, kind=Session.Kind.CANONICAL)
    owner = owner_token(tenant_id=tenant.pk, qor_id=qor.pk, user_id=user.pk)
    return _search(sessions, owner=owner, query=query, limit=limit, offset=offset, channel=channel)


def conversation_search(
    *, session: Session, query: str, limit: int = SEARCH_LIMIT, offset: int = 0, channel: str = "",
    from_seq: int = 0,
) -> list[SearchHit]:
    """What a search from inside `session` may find, as message_search finds it: in a
    person's canonical chat, their whole conversation with its Qor (every surface, the
    archived ones too, as the chat page's search); in a legacy thread, that thread's
    sessions; anywhere else (a group chat, an email thread, a heartbeat's run), that session
    alone: a group's members read what a search there shows, never a member's own chat.
    `from_seq`: in such a session, only its messages from that seq on."""
    if session.kind == Session.Kind.CANONICAL and session.user_id is not None:
        return message_search(tenant=session.tenant, qor=session.qor, user=session.user, query=query, limit=limit,
                              offset=offset, channel=channel)
    sessions = Session.objects.filter(pk=session.pk, tenant_id=session.tenant_id, qor_id=session.qor_id)
    if session.kind == Session.Kind.LEGACY:  # archived by /clear, the same sender's thread all the same
        sessions = Session.objects.filter(
            tenant_id=session.tenant_id, qor_id=session.qor_id, kind=session.kind, channel=session.channel,
            external_thread_id=session.external_thread_id, user_id=session.user_id,
        )
    owner = owner_token(tenant_id=session.tenant_id, qor_id=session.qor_id, user_id=session.user_id)
    return _search(sessions, owner=owner, query=query, limit=limit, offset=offset, channel=channel,
                   from_seq=from_seq)


def _search(sessions: QuerySet[Session], *, owner: str, query: str, limit: int, offset: int,
            channel: str, from_seq: int = 0) -> list[SearchHit]:
    """The user and assistant messages of `sessions` holding every word of `query`, newest
    first; `owner` is the FTS5 owner token of those sessions (they all have one owner)."""
    terms = message_terms(query)
    if not terms or limit <= 0 or offset < 0:
        return []
    rows = Message.objects.filter(session__in=sessions, role__in=[Message.Role.USER, Message.Role.ASSISTANT])
    if channel:
        rows = rows.filter(channel=channel)
    if from_seq:
        rows = rows.filter(seq__gte=from_seq)
    rows = rows.exclude(content="").exclude(metadata__has_key="superseded").exclude(metadata__has_key="command")
    # A message a rotation carried into the next conversation is found there, as its copy.
    rows = rows.exclude(metadata__has_key="carried_to")
    if connection.vendor == "postgresql":
        # The expression of the index, word for word; the words are parameters.
        tsquery, params = _pg_tsquery(terms)
        rows = rows.filter(RawSQL(f"{PG_VECTOR} @@ ({tsquery})", params, output_field=BooleanField()))
    elif connection.vendor == "sqlite":
        rows = rows.filter(id__in=RawSQL(f"SELECT rowid FROM {SEARCH_TABLE} WHERE {SEARCH_TABLE} MATCH %s",
                                         [f'owner : "{owner}" AND content : ({_fts5_terms(terms)})']))
    else:  # another database: a scan of the owner's rows, for correctness only
        rows = _scanned(rows, terms)
    for term in terms:
        if UNSPACED_RUN.fullmatch(term):  # as typed, in either width of its katakana
            rows = rows.filter(reduce(or_, (Q(content__contains=form) for form in width_forms(term))))
    # The columns a hit shows, not the whole row (its tool calls and metadata decoded for nothing).
    found = (rows.select_related("session").only(*_HIT_COLUMNS)
             .order_by("-created_at", "-id")[offset:offset + limit])
    return [
        SearchHit(session_id=m.session_id, seq=m.seq, role=m.role, channel=m.channel, sender_name=m.sender_name,
                  content=m.content, created_at=m.created_at, active=m.session.state == Session.State.ACTIVE)
        for m in found
    ]


_HIT_COLUMNS = ("session_id", "seq", "role", "channel", "sender_name", "content", "created_at", "session__state")


def _scanned(rows: QuerySet[Message], terms: list[str]) -> QuerySet[Message]:
    """Of `rows`, those holding every term as the index would find it (scan_finds), read
    one by one: where no full-text index serves a search."""
    ids = [pk for pk, content in rows.values_list("pk", "content").iterator()
           if all(scan_finds(content, term) for term in terms)]
    return rows.filter(pk__in=ids)


def hit_snippet(text: str, terms: list[str], *, width: int) -> str:
    """About `width` characters of a found message's `text` around the first word found,
    with an ellipsis where it was cut."""
    spans = _spans(text, terms, first=True)
    start = max(0, spans[0][0] - width // 3) if spans else 0
    if start:
        space = text.find(" ", start, start + 20)
        start = space + 1 if space >= 0 else start
    end = start + width
    return ("…" if start else "") + text[start:end].strip() + ("…" if end < len(text) else "")


def hit_spans(text: str, terms: list[str]) -> list[tuple[int, int]]:
    """Where in `text` the words found are, in order: (start, end) of each, as written
    ("Straße" for the term "straße"). Words are found stemmed ("leases" finds "lease"), so
    a word is one that starts with the stem-ish start of a term, or an Arabic word whose
    prefix is followed by it ("المدرسة" for "مدرسة", its prefix with it); a run of letters
    written without spaces where it stands as typed, and a Korean word of two syllables or
    more too, inside a word or at its start (one syllable, at the start of a word)."""
    return _spans(text, terms, first=False)


def _spans(text: str, terms: list[str], *, first: bool) -> list[tuple[int, int]]:
    """hit_spans; with `first`, only where each term is first found, each span ending where
    the term does (a snippet needs only the first word's place: a message of a megabyte
    holding the word thousands of times, or in a word a megabyte long, was read to its end)."""
    folded, origin = _folded(text)
    spans = []
    for term in terms:
        unspaced = UNSPACED_RUN.fullmatch(term) is not None
        inside = unspaced or (len(term) > 1 and HANGUL_WORD.fullmatch(term) is not None)
        stems = (width_forms(term) if unspaced else [term] if inside
                 else [form[:max(4, len(form) - 2)] for form in arabic_forms(term)])
        for stem in stems:
            at = folded.find(stem)
            while at >= 0:
                start, end = origin[at], origin[at + len(stem) - 1] + 1
                if not inside:
                    # From where the letters kept before it end: what lies between (a
                    # tatweel or a point, folded to nothing: "ـمرحبا") is the word's; from
                    # its prefix, when an Arabic word's is before it ("المدرسة").
                    at_word = at - _arabic_prefix_before(folded, at)
                    start = origin[at_word - 1] + 1 if at_word else 0
                if inside or start == 0 or not _in_word(text[start - 1]):
                    while not inside and not first and end < len(text) and _in_word(text[end]):
                        end += 1
                    spans.append((start, end))
                    if first:
                        break
                at = folded.find(stem, at + len(stem))
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start < merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def _folded(text: str) -> tuple[str, Sequence[int]]:
    """`text` folded as search terms are, each letter alone (a letter may fold to none),
    and for each folded character, the place in `text` of the letter it came from. Each
    distinct letter is folded once, and where every one folds to one letter the text is
    translated whole (a message of a megabyte took half a second letter by letter)."""
    if text.isascii():  # folding is lower() there, one letter for one
        return text.lower(), range(len(text))
    table = {ord(char): fold(char) for char in set(text)}
    if all(len(low) == 1 for low in table.values()):
        return text.translate(table), range(len(text))
    parts: list[str] = []
    origin: list[int] = []
    for i, char in enumerate(text):
        low = table[ord(char)]
        parts.append(low)
        origin.extend([i] * len(low))
    return "".join(parts), origin


def _arabic_prefix_before(folded: str, at: int) -> int:
    """How many letters before `at` in `folded` are the prefix (sessions_app.fulltext.
    ARABIC_PREFIXES) of the Arabic word they begin: 0 when none is. Only the word's first
    five letters are read, all a prefix's rule needs, however long the word."""
    for length in (1, 2, 3):
        begins = at - length
        if begins < 0 or (begins and ARABIC_WORD.match(folded[begins - 1])):
            continue
        head = ARABIC_WORD.match(folded[begins:begins + 5])
        if head is not None and len(head.group()) > length and arabic_prefix(head.group()) == length:
            return length
    return 0


def _in_word(char: str) -> bool:
    """Whether `char` continues a word of a space-separated language: a letter of a script
    written without spaces is a word of its own to the index, so it ends one ("Ｔｏｋｙｏの")."""
    return ((char.isalnum() or char == "_" or unicodedata.category(char).startswith("M"))
            and UNSPACED_RUN.fullmatch(char) is None)


def _pg_tsquery(terms: list[str]) -> tuple[str, list[str]]:
    """The tsquery of every term, and its parameters. Words as before migration 0010, in one
    plainto_tsquery; an Arabic word with a prefix as itself or the word without it
    (checked to be Arabic letters alone, so the tsquery syntax around it is ours); a run of unspaced letters as each of its letters, spaced by the index's
    own function (not as a phrase, which the index would have to check again row by row);
    a Korean word as a prefix (checked to be Hangul alone, so the tsquery syntax around it
    is ours)."""
    words = [t for t in terms
             if not UNSPACED_RUN.fullmatch(t) and not HANGUL_WORD.fullmatch(t) and len(arabic_forms(t)) == 1]
    parts, params = [], []
    if words:
        parts.append(f"plainto_tsquery('{PG_CONFIG}', %s)")
        params.append(" ".join(words))
    for term in terms:
        if UNSPACED_RUN.fullmatch(term):
            # Its letters in either width: the function, unlike search_text, keeps the width.
            forms = width_forms(term)
            parts.append("(" + " || ".join([f"plainto_tsquery('{PG_CONFIG}', {SEARCH_TEXT_FUNCTION}(%s))"] * len(forms))
                         + ")")
            params += forms
        elif HANGUL_WORD.fullmatch(term):
            parts.append(f"to_tsquery('{PG_CONFIG}', %s)")
            params.append(" | ".join(f"'{prefix}':*" for prefix in korean_prefixes(term)))
        elif len(forms := arabic_forms(term)) > 1:
            parts.append(f"to_tsquery('{PG_CONFIG}', %s)")
            params.append(" | ".join(f"'{form}'" for form in forms))
    return " && ".join(parts), params


def _fts5_terms(terms: list[str]) -> str:
    """The FTS5 expression of every term: each quoted, so nothing typed is FTS5 syntax; a
    run of unspaced letters spaced as the trigger indexes it (a quoted phrase), a Korean
    word as the start of a word or of an inner part of one (korean_prefixes), an Arabic
    word with a prefix as itself or the word without it (arabic_forms)."""
    quoted = []
    for term in terms:
        if HANGUL_WORD.fullmatch(term):
            quoted.append("(" + " OR ".join(f'"{prefix}"*' for prefix in korean_prefixes(term)) + ")")
            continue
        if len(forms := arabic_forms(term)) > 1:
            quoted.append("(" + " OR ".join(f'"{form}"' for form in forms) + ")")
            continue
        if UNSPACED_RUN.fullmatch(term):
            term = (search_text(term) or term).strip()
        quoted.append('"' + term.replace('"', '""') + '"')
    return " AND ".join(quoted)


def sqlite_search_text_function(sender: object, connection: BaseDatabaseWrapper, **kwargs: object) -> None:
    """`connection_created` receiver: the SQLite function the search triggers index a
    message's text with (migration 0010), on every connection, as a Python function can
    only be. A connection without it (the sqlite3 shell) cannot write a user or assistant
    message."""
    if connection.vendor == "sqlite":
        connection.connection.create_function(SEARCH_TEXT_FUNCTION, 1, _indexed_text, deterministic=True)


def _indexed_text(content: object) -> object:
    return (search_text(content) or content) if isinstance(content, str) else content


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
