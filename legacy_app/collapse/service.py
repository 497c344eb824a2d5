"""Collapse one user, or everyone in scope, with outcomes to report."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.db.models import Count, Max, Min
from django.utils import timezone

from memory_app.digest import DigestMessage, DigestSpan, digest_summarize
from memory_app.models import Memory
from memory_app.services import memory_add
from qorven.agent.gateway import turn_enqueue
from sessions_app.models import Message, Session
from tenancy.models import Qor, Tenant
from tenancy.selectors import tenant_serving_now

from .condensed import condensed_through, merged_note, uncondensed_since
from .merge import (
    images_of_duplicates_move,
    kept_rows_move,
    rows_count,
    session_openings,
)
from .owners import ChatOwner, collapse_owners, owner_sessions
from .references import links_renumber, links_to_follow
from .threads import run_in_threads

log = logging.getLogger(__name__)

# A digest sees the opening messages of its session, each cut to this many characters.
DIGEST_SAMPLE = 80
DIGEST_SAMPLE_CHARS = 500


class CollapseConflict(Exception):
    """The user's chat changed under the collapse (a canonical session appeared) or is in
    use (a reply is being written in it); nothing was changed: run again."""


@dataclass
class CollapseOutcome:
    """What collapsing one (tenant, qor, user) did, or would do on a dry run."""

    owner: ChatOwner
    label: str = ""
    sessions: int = 0  # mergeable sessions found, the canonical one included
    messages: int = 0  # rows in them
    duplicates: int = 0  # rows left behind in archived sessions
    archived: int = 0
    digests: int = 0
    canonical_id: int | None = None
    applied: bool = False
    error: str = ""

    @property
    def merged(self) -> int:
        """Messages in the canonical session afterwards."""
        return self.messages - self.duplicates


@dataclass
class CollapseTotals:
    """Sums over a run's outcomes, for the summary."""

    users: int = 0
    failed: int = 0
    skipped: int = 0  # in a suspended workspace: not collapsed
    sessions: int = 0
    archived: int = 0
    messages: int = 0
    duplicates: int = 0
    digests: int = 0

    def add(self, outcome: CollapseOutcome) -> None:
        if outcome.error:
            self.failed += 1
            return
        self.users += 1
        self.sessions += outcome.sessions
        self.archived += outcome.archived
        self.messages += outcome.messages
        self.duplicates += outcome.duplicates
        self.digests += outcome.digests


def _label(qor: Qor, user: User) -> str:
    return f"{qor.tenant.slug}/{qor.slug} {user.get_username()}"


def _load(owner: ChatOwner, qor: Qor | None = None) -> tuple[Qor, User]:
    if qor is None or (qor.pk, qor.tenant_id) != (owner.qor_id, owner.tenant_id):
        qor = Qor.objects.select_related("tenant").get(pk=owner.qor_id, tenant_id=owner.tenant_id)
    return qor, get_user_model().objects.get(pk=owner.user_id)


@dataclass(frozen=True)
class _Stats:
    """A session's messages at a glance: what its digest covers, and its highest seq."""

    span: DigestSpan
    top_seq: int


def _stats(sessions: list[Session]) -> dict[int, _Stats]:
    """Count, channels, period and top seq of every session, in one aggregate query."""
    rows: dict[int, list[Mapping[str, Any]]] = {s.pk: [] for s in sessions}
    per_channel = (
        Message.objects.filter(session__in=sessions)
        .values("session_id", "channel")
        .annotate(n=Count("id"), first=Min("created_at"), last=Max("created_at"), top=Max("seq"))
        .order_by()
    )
    for row in per_channel:
        rows[row["session_id"]].append(row)
    return {
        pk: _Stats(
            DigestSpan(
                count=sum(r["n"] for r in mine),
                channels=frozenset(r["channel"] for r in mine),
                first_at=min((r["first"] for r in mine), default=None),
                last_at=max((r["last"] for r in mine), default=None),
            ),
            top_seq=max((r["top"] for r in mine), default=0),
        )
        for pk, mine in rows.items()
    }


def _digests(*, qor: Qor, user: User, spans: dict[int, DigestSpan]) -> int:
    """Write one `conversation_digest` memory per non-empty session; return how many.

    A digest gets its session's span and opening messages (content cut short): the plain
    extract only needs the first lines, and a summarizer model could not take a long
    session whole anyway.
    """
    spans = {pk: span for pk, span in spans.items() if span.count}
    openings = session_openings(list(spans), limit=DIGEST_SAMPLE, chars=DIGEST_SAMPLE_CHARS)
    written = 0
    for pk, span in spans.items():
        sample = [DigestMessage(*row) for row in openings.get(pk, [])]
        text = digest_summarize(qor=qor, messages=sample, span=span)
        if not text.strip():
            continue
        memory_add(
            tenant=qor.tenant,
            qor=qor,
            user=user,
            type=Memory.Type.CONVERSATION_DIGEST,
            content=text,
            channels=span.channels,
            period_start=span.first_at,
            period_end=span.last_at,
            source_session_id=pk,
        )
        written += 1
    return written


def _collapsible(sessions: list[Session]) -> bool:
    return any(s.kind == Session.Kind.LEGACY for s in sessions)


def _turn_running(sessions: list[Session]) -> bool:
    """Whether a turn (or a /compact) holds one of the sessions: its lease has not run out.
    Read under the sessions' row locks, so no turn takes one until the collapse commits."""
    now = timezone.now()
    return any(
        s.turn_owner and s.turn_lease_until is not None and s.turn_lease_until > now
        for s in sessions
    )


def collapse_preview(*, owner: ChatOwner, qor: Qor | None = None) -> CollapseOutcome:
    """What `collapse_user` would do for `owner`, changing nothing."""
    qor, user = _load(owner, qor)
    sessions = list(owner_sessions(owner))
    canonical = next((s for s in sessions if s.kind == Session.Kind.CANONICAL), None)
    outcome = CollapseOutcome(owner, label=_label(qor, user), sessions=len(sessions))
    if not _collapsible(sessions):
        return outcome
    outcome.canonical_id = canonical.pk if canonical else None
    outcome.messages, outcome.duplicates = rows_count(
        outcome.canonical_id or 0, [s.pk for s in sessions]
    )
    stats = _stats([s for s in sessions if s is not canonical])
    outcome.archived = len(stats)
    outcome.digests = sum(1 for st in stats.values() if st.span.count)
    return outcome


def collapse_user(
    *,
    owner: ChatOwner,
    qor: Qor | None = None,
    before_archive: Callable[[CollapseOutcome], None] | None = None,
) -> CollapseOutcome:
    """Collapse the chat-family sessions of one (tenant, qor, user) into their canonical one.

    One transaction, the user's sessions locked in id order. `qor` may be passed in when
    already loaded (with its tenant). `before_archive` runs after the messages moved and
    the digests were written, just before the extra sessions are archived: an exception
    from it (a test's injected failure) rolls the user back whole. A user without a legacy
    chat session (none, or only the canonical chat) is returned untouched (`applied`
    False); a lone legacy session becomes the user's canonical chat. A user one of whose
    sessions a turn holds is refused (CollapseConflict), as is one of a workspace the host
    has suspended (kept as it is until resumed). Messages of the canonical chat
    still waiting for an answer keep waiting, and a turn is queued for them after commit.
    """
    qor, user = _load(owner, qor)
    outcome = CollapseOutcome(owner, label=_label(qor, user))
    with transaction.atomic():
        sessions = list(owner_sessions(owner).select_for_update())
        if not tenant_serving_now(tenant_id=owner.tenant_id):
            # Suspended after the run listed this user: kept as it is until resumed.
            raise CollapseConflict(
                "the workspace is suspended; left untouched, run again once it is resumed"
            )
        outcome.sessions = len(sessions)
        if not _collapsible(sessions):
            return outcome
        if _turn_running(sessions):
            # Renumbering under a turn would leave its reply pointing at another message.
            raise CollapseConflict(
                "a reply is being written in this chat; left untouched, run again once it is sent"
            )
        canonical = next((s for s in sessions if s.kind == Session.Kind.CANONICAL), None)
        extras = [s for s in sessions if s is not canonical]
        stats = _stats(sessions)
        if canonical is None:
            try:
                canonical = Session.objects.create(
                    tenant_id=owner.tenant_id,
                    qor_id=owner.qor_id,
                    user_id=owner.user_id,
                    kind=Session.Kind.CANONICAL,
                    started_at=min(s.started_at for s in sessions),
                )
            except IntegrityError:
                # No savepoint: the transaction is spoilt anyway and rolls back whole.
                raise CollapseConflict(
                    "a canonical chat was started during the collapse; run again"
                ) from None
            stats[canonical.pk] = _Stats(DigestSpan(0, frozenset(), None, None), top_seq=0)
        outcome.canonical_id = canonical.pk
        outcome.digests = _digests(
            qor=qor, user=user, spans={s.pk: stats[s.pk].span for s in extras}
        )
        ids = [canonical.pk] + [s.pk for s in extras]
        images_of_duplicates_move(canonical.pk, ids)
        marker = None
        if canonical.compacted_through_seq:
            # The compaction note covers the canonical rows up to here; keep pointing at
            # the same row after renumbering (older merged rows are covered by digests).
            below = Message.objects.filter(
                session=canonical, seq__lte=canonical.compacted_through_seq
            )
            marker = below.order_by("-seq").values_list("id", flat=True).first()
        since = uncondensed_since(sessions)
        outcome.messages = sum(stats[pk].span.count for pk in ids)
        own = stats[canonical.pk]
        shift = max(own.top_seq, outcome.messages) if own.span.count else 0
        # Merged history is not waiting for an answer: a legacy message still waiting when
        # it was collapsed is not answered again on its old channel (its turn is long gone).
        Message.objects.filter(
            session_id__in=[s.pk for s in extras], answer_state=Message.Answer.PENDING
        ).update(answer_state=Message.Answer.ANSWERED)
        links = links_to_follow(tenant_id=owner.tenant_id, session_ids=ids)
        kept = kept_rows_move(canonical.pk, ids, shift=shift)
        links_renumber(canonical_id=canonical.pk, links=links)
        outcome.duplicates = outcome.messages - kept
        canonical.last_seq = kept
        # The chat's own questions still waiting keep waiting, and its progress stops just
        # below the first of them: the turn queued below answers them.
        waiting = Message.objects.filter(session=canonical, answer_state=Message.Answer.PENDING)
        first_waiting = waiting.order_by("seq").values_list("seq", flat=True).first()
        canonical.replied_through_seq = kept if first_waiting is None else first_waiting - 1
        canonical.started_at = min(s.started_at for s in [*sessions, canonical])
        own_floor = 0
        if canonical.compacted_through_seq:
            moved = (
                Message.objects.filter(pk=marker) if marker is not None else Message.objects.none()
            )
            own_floor = moved.values_list("seq", flat=True).first() or 0
        # What each merged chat's summarizer condensed stays condensed (condensed.py).
        canonical.compacted_through_seq = max(own_floor, condensed_through(canonical, since=since))
        canonical.compaction_note = merged_note(canonical, extras)
        canonical.save(
            update_fields=[
                "last_seq",
                "replied_through_seq",
                "started_at",
                "compacted_through_seq",
                "compaction_note",
            ]
        )
        if before_archive is not None:
            before_archive(outcome)
        outcome.archived = Session.objects.filter(pk__in=[s.pk for s in extras]).update(
            state=Session.State.ARCHIVED, ended_at=timezone.now()
        )
        if first_waiting is not None:
            turn_enqueue(session=canonical)  # after commit
        outcome.applied = True
    return outcome


def collapse_sessions(
    *,
    tenant: Tenant | None = None,
    qor_slug: str = "",
    user: User | None = None,
    dry_run: bool = False,
    jobs: int = 1,
    before_archive: Callable[[CollapseOutcome], None] | None = None,
) -> Iterator[CollapseOutcome]:
    """Collapse (or, with `dry_run`, preview) every user in scope.

    Yields one outcome per user as it is done, so callers can show progress. A user that
    fails is rolled back, reported in its outcome's `error`, and the run goes on. With
    `jobs` > 1, that many threads (each with its own database connection) collapse
    different users at once; each user is still one transaction. That pays on
    PostgreSQL, which works on several transactions at a time; SQLite takes one writer
    at a time, so there it only adds waiting.
    """
    owners = collapse_owners(tenant=tenant, qor_slug=qor_slug, user=user)
    step = partial(_collapse_one, dry_run=dry_run, before_archive=before_archive)
    if jobs <= 1:
        qors: dict[int, Qor] = {}
        for owner in owners:
            yield step(owner, qors)
    else:
        yield from run_in_threads(owners, step, jobs=jobs)


def _collapse_one(
    owner: ChatOwner,
    qors: dict[int, Qor],
    *,
    dry_run: bool,
    before_archive: Callable[[CollapseOutcome], None] | None,
) -> CollapseOutcome:
    try:
        qor = qors.get(owner.qor_id)
        if qor is None:
            qor = qors[owner.qor_id] = _load(owner)[0]
        if dry_run:
            return collapse_preview(owner=owner, qor=qor)
        return collapse_user(owner=owner, qor=qor, before_archive=before_archive)
    except CollapseConflict as exc:  # the chat in use: expected, and no fault to trace
        log.warning("collapse of %s left for the next run: %s", owner, exc)
        return CollapseOutcome(owner, label=_describe(owner), error=f"{type(exc).__name__}: {exc}")
    except Exception as exc:  # one user's failure must not stop the migration
        log.exception("collapse of %s failed", owner)
        return CollapseOutcome(owner, label=_describe(owner), error=f"{type(exc).__name__}: {exc}")


def _describe(owner: ChatOwner) -> str:
    try:
        return _label(*_load(owner))
    except Exception:  # the label is only for the report
        return f"tenant {owner.tenant_id} qor {owner.qor_id} user {owner.user_id}"
