"""What names a row of the sessions being merged by its seq, kept naming the same row.

A collapse gives every kept row a new seq in the canonical session (and leaves the legacy
sessions it merged empty but for dropped copies). Some rows name another by its place:

- `reply_to`: a reply (or a notice) and the message it answers, in its own session. The
  surfaces pair them, and regenerating replaces the answer it names.
- `carried_to` / `carried_from` (`{"session", "seq"}`): a question a rotation (/compact, a
  manual compaction) carried into the next session, and its original left in the
  archive. A transcript that comes for the original reaches the copy through it
  (sessions_app.selectors.carried_copy); the export shows which is which.
- `from_seq` / `through_seq` of a compaction notice: the first and last message of the
  run it condensed, in its own session (or in `compacted_session`).

Before the rows move, each reference is resolved to the id of the row it names (ids do
not change); after, it is written back as that row's new place. A row left behind as a
duplicate is named by the copy kept in its stead. Originals in the archive are read
locked, so nothing settling one meanwhile (a voice transcript) is written over.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Q

from sessions_app.models import Message

# Keys naming a seq of the holder's own session, or of `compacted_session` when it has one.
OWN_SEQ = ("reply_to",)
RANGE = ("from_seq", "through_seq")
# Keys naming a place anywhere: {"session": id, "seq": n}.
PLACE = ("carried_from", "carried_to")


@dataclass(frozen=True)
class Link:
    holder: int  # the row whose metadata names another, by id
    key: str  # the metadata key that names it
    target: int  # the row named, by id
    implicit: bool  # names a seq of the holder's own session: kept only if the holder moves


@dataclass
class Links:
    links: list[Link] = field(default_factory=list)
    metadata: dict[int, dict[str, Any]] = field(default_factory=dict)  # holder id → as read


def _place(value: Any) -> tuple[int, int] | None:
    if isinstance(value, dict) and isinstance(value.get("session"), int) and isinstance(value.get("seq"), int):
        return value["session"], value["seq"]
    return None


def links_to_follow(*, tenant_id: int, session_ids: list[int]) -> Links:
    """Before the rows move: every reference to a row of `session_ids`, by the row's id."""
    merged = set(session_ids)
    holders = list(
        Message.objects.filter(session_id__in=session_ids)
        .filter(Q(metadata__has_key="reply_to") | Q(metadata__has_key="carried_from")
                | Q(metadata__has_key="carried_to") | Q(metadata__notice="compaction"))
        .values_list("id", "session_id", "seq", "metadata")
    )
    found = Links()
    exact: list[tuple[int, str, bool, tuple[int, int]]] = []  # holder, key, implicit, (session, seq)
    originals: dict[tuple[int, int], tuple[int, int, int]] = {}  # original's place → its copy's (id, place)
    for pk, session_id, seq, metadata in holders:
        if not isinstance(metadata, dict):
            continue
        found.metadata[pk] = metadata
        if isinstance(metadata.get("reply_to"), int):
            exact.append((pk, "reply_to", True, (session_id, metadata["reply_to"])))
        for key in PLACE:
            place = _place(metadata.get(key))
            if place is not None and place[0] in merged:
                exact.append((pk, key, False, place))
        source = _place(metadata.get("carried_from"))
        if source is not None and source[0] not in merged:
            originals[source] = (pk, session_id, seq)
        if metadata.get("notice") == "compaction":
            named = metadata.get("compacted_session", session_id)
            if named in merged:
                for key in RANGE:
                    if isinstance(metadata.get(key), int):
                        target = _range_end(named, key, metadata[key])
                        if target is not None:
                            found.links.append(Link(pk, key, target, "compacted_session" not in metadata))
    for pk, key, implicit, target in _resolved(exact):
        found.links.append(Link(pk, key, target, implicit))
    _originals(found, tenant_id, originals)
    return found


def _range_end(session_id: int, key: str, seq: int) -> int | None:
    """The row a notice's range starts at (the first at or after `from_seq`) or ends at
    (the last at or before `through_seq`)."""
    rows = Message.objects.filter(session_id=session_id)
    if key == "from_seq":
        rows = rows.filter(seq__gte=seq).order_by("seq")
    else:
        rows = rows.filter(seq__lte=seq).order_by("-seq")
    return rows.values_list("id", flat=True).first()


def _resolved(
    wanted: list[tuple[int, str, bool, tuple[int, int]]],
) -> Iterable[tuple[int, str, bool, int]]:
    seqs: dict[int, set[int]] = {}
    for *_, (session_id, seq) in wanted:
        seqs.setdefault(session_id, set()).add(seq)
    ids = {
        (session_id, seq): pk
        for session_id, wanted_seqs in seqs.items()
        for pk, seq in Message.objects.filter(session_id=session_id, seq__in=wanted_seqs).values_list("id", "seq")
    }
    for pk, key, implicit, place in wanted:
        if place in ids:
            yield pk, key, implicit, ids[place]


def _originals(found: Links, tenant_id: int, copies: dict[tuple[int, int], tuple[int, int, int]]) -> None:
    """The archived originals of the copies being merged: each names its copy (`carried_to`)."""
    by_session: dict[int, set[int]] = {}
    for session_id, seq in copies:
        by_session.setdefault(session_id, set()).add(seq)
    for session_id, seqs in by_session.items():
        rows = (Message.objects.select_for_update().filter(tenant_id=tenant_id, session_id=session_id, seq__in=seqs)
                .order_by("id").values_list("id", "seq", "metadata"))
        for pk, seq, metadata in rows:
            copy, *copy_place = copies[(session_id, seq)]
            if isinstance(metadata, dict) and _place(metadata.get("carried_to")) == tuple(copy_place):
                found.metadata[pk] = metadata
                found.links.append(Link(pk, "carried_to", copy, False))


def links_renumber(*, canonical_id: int, links: Links) -> int:
    """After the rows moved: every reference names its row's new place in the canonical
    session (the kept copy's, for a row left behind as a duplicate). A reference to its
    holder's own session is rewritten only when the holder moved too. Returns how many
    rows changed."""
    if not links.links:
        return 0
    targets = {link.target for link in links.links}
    seq_of = dict(Message.objects.filter(session_id=canonical_id, id__in=targets).values_list("id", "seq"))
    for left in targets - set(seq_of):  # a duplicate left behind: its kept copy
        same = Message.objects.filter(pk=left).values("role", "created_at", "content").first()
        kept = same and Message.objects.filter(session_id=canonical_id, **same).values_list("seq", flat=True).first()
        if kept:
            seq_of[left] = kept
    moved = set(Message.objects.filter(session_id=canonical_id, id__in={link.holder for link in links.links})
                .values_list("id", flat=True))
    changed: dict[int, dict[str, Any]] = {}
    for link in links.links:
        seq = seq_of.get(link.target)
        if seq is None or (link.implicit and link.holder not in moved):
            continue
        metadata = changed.setdefault(link.holder, dict(links.metadata[link.holder]))
        if link.key in PLACE:
            metadata[link.key] = {**metadata[link.key], "session": canonical_id, "seq": seq}
        else:
            metadata[link.key] = seq
            if link.key in RANGE and "compacted_session" in metadata:
                metadata["compacted_session"] = canonical_id
    rows = [Message(pk=pk, metadata=metadata) for pk, metadata in changed.items()
            if metadata != links.metadata[pk]]
    Message.objects.bulk_update(rows, ["metadata"], batch_size=500)
    return len(rows)
