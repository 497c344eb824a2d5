"""`/search`: the conversation's history search (sessions_app.search) as a few lines of
plain text, answered without a model call and safe on every surface: what was said, and
the words looked for, are quoted with sessions_app.quoting.inert.
"""
from __future__ import annotations

import re
from zoneinfo import ZoneInfo

from tenancy.trust import Trust, trust_allows
from tenancy.zones import person_zone

from .channel_kinds import Channel
from .fulltext import message_terms
from .models import Message, Session
from .quoting import inert, one_line, plain
from .search import SearchHit, conversation_search, hit_snippet
from .selectors import sender_first_seq

PAGE = 5
# How far back `from #N` pages: past that, more words find it sooner.
DEEPEST = 500
SNIPPET = 140  # characters of a found message shown around the first word found
LONGEST = 200  # characters of words to look for, as the chat page's search box takes
USAGE = ("Usage: `/search words` finds them in our conversation, newest first; `/search words from #N` shows "
         "older matches, from the Nth.")

# A page is asked for with `from #N` at the end, as the answer's header and its "Older
# ones" line write it: a `#N` alone is words (`/search issue #12`). "from" is a stop word,
# never looked for, so taking it as the page's mark leaves no words unsearched.
GROUP_SEARCH_EMPTY = "In a group I search only what was said since you first wrote in it, and there is nothing yet."
# A signed number or a zero is a page mistyped, answered as one; a word after the hash
# (`from #travel`, a channel's or a tag's name) is words.
_PAGE_MARK = re.compile(r"(?:^|\s)from\s+#([+-]?)([0-9]+)$", re.IGNORECASE)
_FAR = 10 ** 9  # a page number past any page: of a number longer than that only its sign counts


def search_answer(*, session: Session, args: str, trust: str, sender_id: str = "") -> str:
    """The answer to `/search <args>` in `session`: the newest PAGE matches (from the Nth,
    when the words end with `from #N`), each with its number, date, surface, writer and
    the text around the words found. In a group, whose members all read the answer,
    newcomers too, only what was said since `sender_id` (the platform account asking)
    first wrote there, as /history shows."""
    if session.kind == Session.Kind.CANONICAL and not trust_allows(trust, Trust.PAIRED):
        # The canonical chat holds every surface's messages: shown only to its paired person.
        return "Our conversation is searched only once you are paired with me."
    words, first = _split(args)
    if not words:
        return USAGE
    if len(words) > LONGEST:
        return f"Look for at most {LONGEST} characters at a time: a few telling words find it best."
    if not message_terms(words):
        # Stop words alone ("the", "what is it"): every message has them, and the index none.
        return "Those words are too common to look for; add one that says more."
    if first < 1:
        return f"Matches are numbered from #1, the newest: `/search {_typed(words)}` shows the first ones."
    after = first - 1
    if after >= DEEPEST:
        return f"Only the newest {DEEPEST} matches are shown; add a word to find it sooner."
    since = 0
    if session.kind == Session.Kind.GROUP:
        first = sender_first_seq(session=session, sender_id=sender_id)
        if first is None:  # no account named: nothing shown is the safe answer
            return GROUP_SEARCH_EMPTY
        since = first
    found = conversation_search(session=session, query=words, limit=PAGE + 1, offset=after, from_seq=since)
    quoted = inert(words)
    if not found:
        if since and after == 0:
            return f"Nothing said in this group since you first wrote in it matches “{quoted}”."
        return (f"Nothing in our conversation matches “{quoted}”." if after == 0
                else f"There are no older matches for “{quoted}”.")
    head = (f"Found in our conversation, newest first (“{quoted}”):" if after == 0
            else f"Older matches for “{quoted}” (from #{after + 1}):")
    terms = message_terms(words)
    zone = person_zone(tenant=session.tenant, user_id=session.user_id)
    lines = [head, *(_line(hit, number=after + i + 1, session=session, terms=terms, zone=zone)
                     for i, hit in enumerate(found[:PAGE]))]
    if len(found) > PAGE and after + PAGE < DEEPEST:
        lines.append(f"Older ones: `/search {_typed(words)} from #{after + PAGE + 1}`.")
    return "\n".join(lines)


def _split(args: str) -> tuple[str, int]:
    """The words and the number of the first match asked for (`from #N` at the end; 1
    without): zero or less for a page that is none (`#0`, `#-1`)."""
    text = args.strip()
    mark = _PAGE_MARK.search(text)
    if mark is None:
        return text, 1
    digits = mark.group(2).lstrip("0")
    # int() refuses a string of more than 4,300 digits; any number of ten is past the deepest page.
    number = int(digits or "0") if len(digits) < 10 else _FAR
    return text[:mark.start()].strip(), -number if mark.group(1) == "-" else number


def _typed(words: str) -> str:
    """`words` to quote in a code span, where nothing formats but a backtick, which
    separates words as a space does."""
    return " ".join(plain(words).replace("`", " ").split())


def _line(hit: SearchHit, *, number: int, session: Session, terms: list[str], zone: ZoneInfo) -> str:
    when = hit.created_at.astimezone(zone)
    surface = Channel(hit.channel).label if hit.channel in Channel.values else hit.channel
    if hit.role == Message.Role.ASSISTANT:
        writer = session.qor.name
    elif session.user_id is not None:  # the person's own chat or thread
        writer = "you"
    else:  # a group's: whoever wrote it
        writer = hit.sender_name or "someone"
    text = hit_snippet(one_line(hit.content), terms, width=SNIPPET)
    return f"#{number} · {when:%d %b %Y %H:%M} · {surface} · {inert(writer)} — {inert(text)}"

