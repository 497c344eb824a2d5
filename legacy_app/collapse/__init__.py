"""Collapse per-channel chat sessions into the one canonical chat (SPEC §7).

A per-channel install (or `QORVEN_LEGACY_SESSIONS=1`) leaves a user with one legacy
session per chat-family channel. Collapsing gives every (tenant, qor, user) with an active
legacy chat-family session (beside others, or alone) a single canonical session holding all
their messages:

- in created_at order (ties by original seq, then id), renumbered 1..n;
- deduplicated on (role, created_at, content): the copy already in the canonical session,
  else the oldest row, is kept; the others stay untouched in their archived session, so
  no row is ever deleted (images of a dropped copy move to the kept one);
- every row keeps its channel tag, sender, metadata and external ids: kept rows are moved
  (UPDATE session_id, seq), not copied, so external-id dedupe keeps working;
- what names a row by its seq (a reply, a carried copy and its archived original, a
  compaction notice's range) names the same row afterwards (references.py);
- one `conversation_digest` memory per archived (non-empty) session;
- the extra sessions archived;
- merged legacy messages count as answered; the canonical chat's own questions still
  waiting keep waiting and get their turn once the user is committed;
- a user whose chat a turn holds (a reply being written) is left untouched, to run again;
- a workspace the host suspended is left untouched (no digest, no turn queued) and said
  to be, to run again once it is resumed.

Each user is one transaction with their sessions locked (FOR UPDATE on PostgreSQL;
SQLite's BEGIN IMMEDIATE serialises writers anyway): an interruption leaves every user
fully collapsed or untouched, and a concurrent append waits, then lands in the merged
session or is refused by the archived one (SessionClosed). Running again is a no-op, since
a collapsed user has a single chat-family session. The merge runs as set-based SQL inside
the database, so Python holds one user's handful of session rows at a time: memory stays
flat however many messages there are.
"""

from __future__ import annotations

from .owners import MERGEABLE, ChatOwner, collapse_owner_count, collapse_owners, collapse_suspended
from .service import (
    CollapseConflict,
    CollapseOutcome,
    CollapseTotals,
    collapse_preview,
    collapse_sessions,
    collapse_user,
)

__all__ = [
    "MERGEABLE",
    "ChatOwner",
    "CollapseConflict",
    "CollapseOutcome",
    "CollapseTotals",
    "collapse_owner_count",
    "collapse_owners",
    "collapse_preview",
    "collapse_sessions",
    "collapse_suspended",
    "collapse_user",
]
