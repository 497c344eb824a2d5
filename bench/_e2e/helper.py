"""The database helper of bench/e2e.py: a child process with Django set up for the layout."""
from __future__ import annotations

import time
import uuid
from typing import Any

from _servers import (
    django_setup,
    helper_loop,
)

# --- the database helper (a child process with Django set up for the layout) -----------------
from _e2e.common import (
    CLIENTS,
    CONCURRENT_FIRST,
    CONCURRENT_USERS,
    OTHER_USER,
    OWNER,
    QOR,
    SENDERS,
    SEQ_USER,
    SMALL_SESSION,
    TENANT,
    TG_BASE_ID,
    TG_SECRET,
    USERS,
)


def helper_main() -> int:
    """Set up and read back the layout's database (commands from the parent on stdin)."""
    django_setup()
    from io import StringIO

    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection
    from django.db.models import Count, Max

    from _common import fill, settle
    from channels_app.models import Identity, InboundEvent, OutboundDelivery
    from channels_app.services import binding_create
    from sessions_app.models import Message, Session
    from sessions_app.services.append import message_append
    from sessions_app.services.resolve import session_resolve
    from tenancy.models import ApiToken, Membership, Qor, Tenant
    from tenancy.selectors import token_digest
    from tenancy.services import api_token_create

    User = get_user_model()
    pg = connection.vendor == "postgresql"

    def chat(user: Any) -> Session:
        tenant = Tenant.objects.get(slug=TENANT)
        return session_resolve(tenant=tenant, qor=Qor.objects.get(tenant=tenant, slug=QOR), channel="web", user=user)

    def user(i: int) -> Any:
        return User.objects.get(username=f"u{i:04d}")

    def setup() -> Any:
        """Tenant, Qor, owner, binding; USERS members with a token each, the first SENDERS
        paired to Telegram senders; the chats the sockets watch exist (a greeting each),
        the turn users' with SMALL_SESSION messages."""
        call_command("migrate", interactive=False, verbosity=0)
        call_command("bootstrap", tenant=TENANT, qor=QOR, owner=OWNER, stdout=StringIO())
        tenant = Tenant.objects.get(slug=TENANT)
        binding_create(tenant=tenant, qor=Qor.objects.get(tenant=tenant, slug=QOR), kind="telegram",
                       credentials={"token": "111:AAA", "secret": TG_SECRET, "username": "aria_bot"})
        User.objects.bulk_create([User(username=f"u{i:04d}", password="!") for i in range(USERS)])  # unusable
        people = list(User.objects.filter(username__startswith="u0").order_by("username"))
        Membership.objects.bulk_create([Membership(tenant=tenant, user=u) for u in people])
        Identity.objects.bulk_create([
            Identity(tenant=tenant, channel="telegram", external_id=str(TG_BASE_ID + i), user=people[i],
                     display_name=f"Sender {i}", approval=Identity.Approval.APPROVED, reply_target=str(TG_BASE_ID + i))
            for i in range(SENDERS)])
        raws = [f"qv_{uuid.uuid4().hex}{uuid.uuid4().hex}" for _ in people]
        ApiToken.objects.bulk_create([ApiToken(tenant=tenant, user=u, name="bench", prefix=raw[:10],
                                               digest=token_digest(raw)) for u, raw in zip(people, raws)])
        owner = User.objects.get(username=OWNER)
        for person in [owner, *people[:CLIENTS]]:
            message_append(session=chat(person), role="assistant", content="Hello!", channel="web", notify=False)
        for i in [SEQ_USER, *range(CONCURRENT_FIRST, CONCURRENT_FIRST + CONCURRENT_USERS), OTHER_USER]:
            fill(chat(people[i]), SMALL_SESSION, pg)
        settle(pg)
        return {"owner": api_token_create(tenant=tenant, user=owner, name="bench")[1], "users": raws}

    def leftovers_clear() -> Any:
        """What the last phase's killed processes left is closed, so the next phase
        measures its own work: unprocessed events, unanswered messages, leases, sends."""
        return {
            "events": InboundEvent.objects.filter(state__in=["pending", "processing"])
            .update(state="done", result="closed by the benchmark"),
            "messages": Message.objects.filter(answer_state=Message.Answer.PENDING)
            .update(answer_state=Message.Answer.FAILED),
            "leases": Session.objects.exclude(turn_owner="").update(turn_owner="", turn_lease_until=None),
            "deliveries": OutboundDelivery.objects.filter(state__in=["pending", "sending"])
            .update(state="failed", last_error="closed by the benchmark"),
        }

    def event_count() -> int:
        return InboundEvent.objects.count()

    def publish_alone(users: list[int], keys: list[str]) -> Any:
        """The fan-out alone: a message per chat (user index, or -1 for the owner) stored
        without its live event, then the event published from this process — another
        process than the server's, as a worker's would be — stamped as it is handed over."""
        from channels_app.live_events import message_event
        from qorven.runtime.publisher import broadcast_flush, broadcast_soon

        owner = User.objects.get(username=OWNER)
        stored = [message_append(session=chat(owner if i < 0 else user(i)), role="user", content=f"alone [{key}]",
                                 channel="web", notify=False).message for i, key in zip(users, keys)]
        for message in stored:
            event = message_event(message)
            event["created_at"] = time.time()  # from the event, not the row
            broadcast_soon(message.session_id, event)
        return broadcast_flush()

    def replies_sent() -> Any:
        """The replies sent to the fake Telegram so far, and when the last one was."""
        parts = OutboundDelivery.objects.filter(binding__kind="telegram")
        last = parts.filter(state="sent").aggregate(last=Max("sent_at"))["last"]
        return {"sent": parts.filter(state="sent").count(), "failed": parts.filter(state="failed").count(),
                "last": last.timestamp() if last else None}

    def ingest_counts() -> Any:
        events = InboundEvent.objects.all()
        last = events.aggregate(last=Max("created_at"))["last"]
        stored = Message.objects.filter(channel="telegram", role="user").exclude(external_id="")  # not fill()'s
        twice = list(stored.values("external_id").annotate(n=Count("pk")).filter(n__gt=1).values_list("external_id", "n"))
        return {
            "ids": list(events.values_list("external_id", flat=True)),
            "last": last.timestamp() if last else None,
            "states": dict(events.values_list("state").annotate(n=Count("pk")).values_list("state", "n")),
            "messages": stored.count(),
            "messages_twice": sum(n - 1 for _, n in twice),
            "twice_sample": [list(stored.filter(external_id=x).values("session_id", "seq", "external_scope",
                                                                     "external_id", "content", "created_at"))
                             for x, _ in twice[:3]],
        }

    def fill_session(user_index: int, size: int) -> Any:
        started = time.perf_counter()
        session = chat(user(user_index))
        if session.last_seq:
            raise ValueError(f"u{user_index:04d}'s session is not empty")
        fill(session, size, pg)
        filled = time.perf_counter() - started
        settle(pg)
        return {"fill_s": round(filled, 1), "settle_s": round(time.perf_counter() - started - filled, 1),
                "messages": Message.objects.count()}

    def chat_close(user_index: int) -> Any:
        """Archive the user's chat: the summarizer catching up on a filled session's backlog
        (a run after every exchange over the window, one after another) stops at its next
        run instead of sharing the CPUs with the cases after it. Its rows stay."""
        return Session.objects.filter(pk=chat(user(user_index)).pk).update(state=Session.State.ARCHIVED)

    def platform_stages(sender: int, first_update: int) -> Any:
        """Where a Telegram turn's time went, from the rows' own stamps (p50 ms of each step
        over the sender's turns from update `first_update` on): the stored webhook → its
        message in the chat (the task's hop, the channel rules), → the reply stored (the
        turn), → its delivery planned, → sent (the platform answered)."""
        steps: dict[str, list[float]] = {"hop and rules": [], "turn": [], "planned": [], "sent": []}
        events = InboundEvent.objects.filter(sender_id=str(TG_BASE_ID + sender), state="done").order_by("pk")
        for event in events:
            update = int(event.external_id.rsplit(":", 1)[-1]) - 1
            if update < first_update:
                continue
            asked = Message.objects.filter(external_id=event.external_id, role="user").first()
            reply = asked and Message.objects.filter(session_id=asked.session_id, role="assistant",
                                                     metadata__reply_to=asked.seq).first()
            part = reply and OutboundDelivery.objects.filter(message=reply, part=0, state="sent").first()
            if not part:
                continue
            stamps = [event.created_at, asked.created_at, reply.created_at, part.created_at, part.sent_at]
            for name, start, end in zip(steps, stamps, stamps[1:]):
                steps[name].append((end - start).total_seconds() * 1000)
        return {name: round(sorted(ms)[len(ms) // 2], 2) if ms else None for name, ms in steps.items()}

    return helper_loop({"setup": setup, "leftovers_clear": leftovers_clear, "event_count": event_count,
                        "replies_sent": replies_sent, "publish_alone": publish_alone,
                        "ingest_counts": ingest_counts, "fill_session": fill_session, "chat_close": chat_close,
                        "platform_stages": platform_stages})
