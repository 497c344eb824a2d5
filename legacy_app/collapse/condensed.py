"""What the merged sessions' summarizers had condensed, carried into the merged chat.

Each chat had its own compaction state (SPEC §4): the messages up to its
`compacted_through_seq` are left out of its prompt, their summary given instead (its
`compaction_note`, and a rotated chat's `seed_summary`). One floor over the merged chat
cannot follow each chat's own, so the merged chat's floor is the last message before the
oldest one that no summary holds (nothing any summary lacks is left out of a prompt), or
the canonical chat's own floor where that is higher (the merged messages below it are in
their chat's digest), and its note holds every chat's summary. Condensed messages above
the floor are sent as they are again, until the summarizer gets to them.
"""

from __future__ import annotations

from datetime import datetime

from django.db.models import Max, Min, Q

from sessions_app.models import Message, Session


def uncondensed_since(sessions: list[Session]) -> datetime | None:
    """When the oldest message of `sessions` that its chat's summary does not hold was
    written; None when every one is held. Read before the messages move."""
    held = Q(pk__in=[])
    for session in sessions:
        held |= Q(session_id=session.pk, seq__gt=session.compacted_through_seq)
    return Message.objects.filter(held).aggregate(first=Min("created_at"))["first"]


def condensed_through(canonical: Session, *, since: datetime | None) -> int:
    """The merged chat's last seq written before `since` (all of it when None): merged in
    created_at order, those are the messages before the oldest one no summary holds."""
    rows = Message.objects.filter(session=canonical)
    if since is not None:
        rows = rows.filter(created_at__lt=since)
    return rows.aggregate(top=Max("seq"))["top"] or 0


def merged_note(canonical: Session, extras: list[Session]) -> str:
    """The canonical chat's note, then each merged chat's summaries (its seed, its note)."""
    parts = [canonical.compaction_note] + [
        part for s in extras for part in (s.seed_summary, s.compaction_note)
    ]
    return "\n\n".join(part.strip() for part in parts if part.strip())
