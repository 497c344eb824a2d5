"""A reply's delivery ends: sent once, or failed where the person and the admin see it.
Waiting for a platform (a backoff, its retry_after) never holds up anyone else."""
from __future__ import annotations

import json
import time

import pytest
from asgiref.sync import async_to_sync, sync_to_async

from channels_app.chat import chat_events
from channels_app.models import OutboundDelivery
from sessions_app.models import Message, Session
from tenancy.services import api_token_create

from ..conftest import emptied
from ..factories.tenancy import UserFactory
from ..fakes.model_server import reply
from ..fakes.platform_server import Canned
from .conftest import answered_on_telegram, pair
from .live_helpers import communicator, receive_until, session_cookie
from .payloads import post_telegram, telegram_update
from .test_undelivered_reply import ON_THE_WEB as UNSEEN  # our notice that a reply did not get there

pytestmark = pytest.mark.django_db(transaction=True)


def wait_for(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_a_delivery_the_platform_keeps_refusing_with_500_ends_failed_on_the_page_and_in_the_admin(
    client, world, telegram, platform, model_server, drain, settings
):
    settings.QORVEN_SEND_RETRIES = 2
    settings.QORVEN_SEND_BACKOFF = 0.05
    pair(world, "telegram", "42", world.alice)
    platform.default(r"sendMessage", Canned(status=500, body={"ok": False, "description": "Internal Server Error"}))
    model_server.add(reply("You'll never see this."))
    cookie = session_cookie(world.alice)

    async def scenario():
        page = communicator("/ws/chat/acme/aria/", cookie=cookie)
        assert (await page.connect())[0]
        await page.receive_json_from()
        await sync_to_async(post_telegram)(client, telegram_update("hi"))
        events = await receive_until(page, lambda e: e["type"] == "message.delivery", timeout=20)
        await page.disconnect()
        return events

    events = async_to_sync(scenario)()
    drain()
    answer = Message.objects.get(role="assistant")
    assert events[-1] == {"type": "message.delivery", "seq": answer.seq,
                          "delivery": {"state": "failed", "platform": "telegram"}}
    # The first try and two retries; then as many of our notice that it did not get there.
    assert [s.json["text"] for s in platform.sent("sendMessage")] == ["You'll never see this."] * 3 + [UNSEEN] * 3
    delivery = OutboundDelivery.objects.get(message=answer)
    assert (delivery.state, delivery.attempts) == ("failed", 3)
    assert "gave up after 3 attempts" in delivery.last_error and "500" in delivery.last_error

    # A page opened later shows the mark too (it reads the page of history).
    session = Session.objects.get(user=world.alice)
    (shown,) = [e for e in chat_events(session=session) if e["seq"] == answer.seq]
    assert shown["delivery"] == {"state": "failed", "platform": "telegram"}
    token = api_token_create(tenant=world.tenant_a, user=world.alice)[1]
    api = client.get("/v1/qors/aria/messages", HTTP_AUTHORIZATION=f"Bearer {token}").json()
    assert [(m["role"], m.get("delivery")) for m in api["messages"]] == [
        ("user", None), ("assistant", {"state": "failed", "platform": "telegram"}),
        ("system", {"state": "failed", "platform": "telegram"})]

    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    failed = client.get("/admin/channels_app/outbounddelivery/?state__exact=failed").content.decode()
    assert "gave up after 3 attempts" in failed
    assert "gave up" not in client.get("/admin/channels_app/outbounddelivery/?state__exact=sent").content.decode()


def test_a_401_from_the_platform_fails_the_delivery_after_one_attempt(
    client, world, telegram, platform, model_server, drain
):
    pair(world, "telegram", "42", world.alice)
    platform.default(r"sendMessage", Canned(status=401, body={"ok": False, "description": "Unauthorized"}))
    model_server.add(reply("nobody will read this"))
    post_telegram(client, telegram_update("hi"))
    drain()
    # The bot's token is refused: our notice that the reply did not get there is stored,
    # not sent through the same bot (tests/channels_app/test_account_refused.py).
    assert [s.json["text"] for s in platform.sent("sendMessage")] == ["nobody will read this"]
    delivery = OutboundDelivery.objects.get(message__role="assistant")
    assert (delivery.state, delivery.attempts) == ("failed", 1)
    assert delivery.last_error.startswith("telegram refused the account itself") and ": 401: " in delivery.last_error
    notice = OutboundDelivery.objects.get(message__content=UNSEEN)
    assert (notice.state, notice.attempts) == ("failed", 0)


def test_a_retry_after_is_waited_out_once_without_holding_up_another_tenants_reply(
    client, world, telegram, platform, model_server, drain
):
    pair(world, "telegram", "42", world.alice)
    platform.script(r"sendMessage", Canned(status=429, body={
        "ok": False, "error_code": 429, "description": "Too Many Requests: retry after 2",
        "parameters": {"retry_after": 2}}))
    model_server.default = reply("Hello.")
    post_telegram(client, telegram_update("hi"))
    assert wait_for(lambda: len(platform.sent("sendMessage")) == 1)
    refused_at = platform.sent("sendMessage")[0].at

    # Meanwhile tenant B's owner asks over the API, and is answered while A's reply waits.
    token = api_token_create(tenant=world.tenant_b, user=world.charlie)[1]
    response = client.post("/v1/qors/aria/messages", data=json.dumps({"content": "quick one"}),
                           content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert response.status_code == 201
    assert wait_for(lambda: Message.objects.filter(tenant=world.tenant_b, role="assistant").exists())
    assert len(platform.sent("sendMessage")) == 1  # A's reply is still waiting out its retry_after
    assert OutboundDelivery.objects.get().state == "pending"

    drain()
    sends = platform.sent("sendMessage")
    assert len(sends) == 2  # the 429, then once
    assert sends[1].at - refused_at >= 2.0
    assert OutboundDelivery.objects.get().state == "sent"


def test_replies_reuse_one_platform_connection(client, world, telegram, platform, model_server, drain):
    """No client (and no TLS context) is built per send: consecutive replies travel on the
    same kept-alive connection."""
    pair(world, "telegram", "42", world.alice)
    model_server.default = reply("Hi.")
    for n in range(3):
        post_telegram(client, telegram_update(f"hello {n}", message_id=100 + n))
        drain()
    sends = platform.sent("sendMessage")
    assert len(sends) == 3 and len({s.peer for s in sends}) == 1


def test_a_channel_switched_off_sends_nothing_not_even_a_heartbeats_message(client, world, telegram, platform,
                                                                            drain):
    from sessions_app.services.append import message_append
    from sessions_app.services.resolve import session_resolve
    from tenancy.models import PluginSetting

    identity = pair(world, "telegram", "42", world.alice)
    identity.reply_target = "42"
    identity.save(update_fields=["reply_target"])
    PluginSetting.objects.create(tenant=world.tenant_a, kind="channel", name="telegram", enabled=False)
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="telegram", user=world.alice)
    # What a heartbeat delivering to Telegram appends (no message of the person's to answer).
    message_append(session=session, role="assistant", content="Good morning!", channel="telegram",
                   metadata={"heartbeat": 1, "heartbeat_name": "brief"})
    drain()
    assert platform.sent("sendMessage") == []
    row = OutboundDelivery.objects.get()
    assert (row.state, row.last_error) == ("failed", "the telegram channel is switched off for this workspace")
    assert chat_events(session=session)[-1]["delivery"] == {"state": "failed", "platform": "telegram"}


def test_a_replys_parts_are_planned_once_with_one_statement_and_no_transaction_around_it(world, telegram, drain):
    """A reply to Telegram gets its delivery parts in one round trip to the database (an
    INSERT that is a transaction of its own, on PostgreSQL with the reply's mark of a
    delivery not yet planned cleared in its WITH); planned again, it keeps one row a part."""
    from django.db import connection

    from channels_app.delivery import deliveries_plan
    from sessions_app.services.append import message_append
    from sessions_app.services.resolve import session_resolve
    from tenancy.models import PluginSetting

    identity = pair(world, "telegram", "42", world.alice)
    identity.reply_target = "42"
    identity.save(update_fields=["reply_target"])
    PluginSetting.objects.create(tenant=world.tenant_a, kind="channel", name="telegram", enabled=False)  # no send
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="telegram", user=world.alice)
    ran = []

    def noted(execute, sql, params, many, context):
        ran.append(("INSERT" if "INSERT INTO" in sql.upper() else sql.split()[0].upper(), connection.get_autocommit(),
                    "outbounddelivery" in sql))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(noted):  # the append's commit plans the parts in this thread
        message = message_append(session=session, role="assistant", content="x" * 5000, channel="telegram",
                                 metadata={"heartbeat": 1, "heartbeat_name": "brief"}).message
    assert [r for r in ran if r[2] and r[0] == "INSERT"] == [("INSERT", True, True)]
    message.refresh_from_db()
    assert message.delivery_unplanned is None  # planned: no sweep plans it again
    assert deliveries_plan(message=message) == 2  # planned again (a task run twice)
    drain()
    parts = list(OutboundDelivery.objects.filter(message=message).order_by("part").values_list(
        "tenant_id", "part", "binding_id", "target"))
    assert parts == [(world.tenant_a.pk, 0, telegram.pk, "42"), (world.tenant_a.pk, 1, telegram.pk, "42")]
    assert all(d.created_at and d.updated_at for d in OutboundDelivery.objects.all())


def test_a_reply_with_a_line_of_underscores_longer_than_a_part_is_planned_in_parts_that_fill_it(world, telegram, drain):
    """A blank to fill in ("Name: ____…") longer than Telegram's 4096, where no cut inside
    the run reads as the whole did: it is cut where the part is full. Each part was a single
    character peeled off the run's start, one part for each past the limit, every cut reading
    the whole run again at each of its characters; a part begun inside it showed a rule."""
    from sessions_app.services.append import message_append
    from sessions_app.services.resolve import session_resolve
    from tenancy.models import PluginSetting

    identity = pair(world, "telegram", "42", world.alice)
    identity.reply_target = "42"
    identity.save(update_fields=["reply_target"])
    PluginSetting.objects.create(tenant=world.tenant_a, kind="channel", name="telegram", enabled=False)  # no send
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="telegram", user=world.alice)
    message = message_append(session=session, role="assistant", content="Name: " + "_" * 4110, channel="telegram",
                             metadata={"heartbeat": 1, "heartbeat_name": "form"}).message
    drain()
    parts = list(OutboundDelivery.objects.filter(message=message).order_by("part").values_list("text", flat=True))
    assert len(parts) <= 3
    assert "".join(parts) == "Name:" + "_" * 4110  # the rest of the line is no rule ("———") in its part


@pytest.fixture
def no_platform_clients():
    """This process's platform clients, as a process starting has none."""
    from channels_app.adapters import base

    yield from emptied(base._clients)


def test_the_platform_client_is_built_at_start_and_the_first_reply_uses_it(
    client, world, telegram, platform, model_server, drain, no_platform_clients
):
    from channels_app.adapters.base import platform_client_build

    platform_client_build()
    built = list(no_platform_clients.values())
    assert len(built) == 1
    sent = answered_on_telegram(client, world, platform, model_server, drain, asked="book the table",
                                answer="Right away.")
    assert sent.json["text"] == "Right away."
    assert list(no_platform_clients.values()) == built  # the send built none of its own


def test_a_reply_goes_where_its_message_came_from_even_when_an_earlier_message_took_that_seq_and_rolled_back(
    world, telegram, platform, drain
):
    """What a task remembers of where its messages came from (channels_app.delivery
    .origins_here) is noted only once they are committed: the seq of a message rolled back
    is taken by the next one, whose reply goes to that next one's chat."""
    from django.db import transaction

    from channels_app.delivery import origin_note, origins_here
    from sessions_app.services.append import message_append
    from sessions_app.services.resolve import session_resolve

    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="telegram", user=world.alice)
    with origins_here():
        with pytest.raises(RuntimeError), transaction.atomic():
            lost = message_append(session=session, role="user", content="from the first chat", channel="telegram",
                                  metadata={"binding": telegram.pk, "reply_target": "41"}).message
            origin_note(message=lost, binding=telegram, reply_target="41")
            raise RuntimeError("rolled back")
        kept = message_append(session=session, role="user", content="from the second chat", channel="telegram",
                              metadata={"binding": telegram.pk, "reply_target": "42"}).message
        assert kept.seq == lost.seq
        message_append(session=session, role="assistant", content="Here.", channel="telegram",
                       metadata={"reply_to": kept.seq})
        drain()
    assert OutboundDelivery.objects.get().target == "42"
    (sent,) = platform.sent("sendMessage")
    assert sent.json["chat_id"] in ("42", 42)


def test_a_part_the_platform_accepted_is_sent_once_even_when_its_answer_is_unreadable(
    world, telegram, platform, drain
):
    """A 2xx means the platform has the part: an answer that is not the JSON we expected
    (a proxy's "OK", a truncated body) marks it sent without an id, never sends it again."""
    from channels_app.sweep import sweep
    from channels_app.tasks import deliver_message_task

    from .conftest import replies_waiting

    pair(world, "telegram", "42", world.alice)
    platform.default(r"sendMessage", Canned(raw=b"OK"))
    (reply_,) = replies_waiting(world, telegram, ["Hello."])
    deliver_message_task.delay(world.tenant_a.pk, reply_.pk)
    drain()
    sweep(restart=True)
    drain()
    assert len(platform.sent("sendMessage")) == 1
    assert OutboundDelivery.objects.values_list("state", "platform_message_id").get() == ("sent", "")


def test_a_retry_after_given_as_a_date_is_waited_out_and_the_retries_still_run_out(world, telegram, platform, drain,
                                                                                   settings):
    """RFC 9110 lets Retry-After be an HTTP date: honoured, and counted like any transient
    failure, so a platform that keeps refusing ends the part failed after its retries."""
    from email.utils import format_datetime

    from django.utils import timezone

    from channels_app.tasks import deliver_message_task

    from .conftest import replies_waiting

    settings.QORVEN_SEND_RETRIES = 2
    settings.QORVEN_SEND_BACKOFF = 0.05
    pair(world, "telegram", "42", world.alice)
    soon = format_datetime(timezone.now() + timezone.timedelta(seconds=0.5), usegmt=True)
    platform.default(r"sendMessage", Canned(status=503, body={"ok": False}, headers={"Retry-After": soon}))
    (reply_,) = replies_waiting(world, telegram, ["Hello."])
    deliver_message_task.delay(world.tenant_a.pk, reply_.pk)
    drain()
    row = OutboundDelivery.objects.get(message=reply_)
    assert (row.state, row.attempts) == ("failed", 3)
    assert [s.json["text"] for s in platform.sent("sendMessage")] == ["Hello."] * 3 + [UNSEEN] * 3


def test_a_part_sent_after_a_failed_try_shows_no_error_in_the_admin(client, world, telegram, platform, model_server,
                                                                   drain, settings):
    settings.QORVEN_SEND_BACKOFF = 0.05
    platform.script(r"sendMessage", Canned(status=502, body={"ok": False}))
    pair(world, "telegram", "42", world.alice)
    model_server.add(reply("Hello."))
    assert post_telegram(client, telegram_update("hi")).status_code == 200
    drain()
    assert len(platform.sent("sendMessage")) == 2
    delivery = OutboundDelivery.objects.get()
    assert (delivery.state, delivery.attempts, delivery.last_error) == ("sent", 2, "")


def test_every_platform_channel_the_store_marks_for_delivery_has_a_platform_to_send_it():
    """The store marks a reply on these as awaiting its delivery (sessions_app.channel_kinds),
    and delivery plans what is marked: each must be a platform's, and every platform's one
    of them."""
    from channels_app.delivery import PLATFORM_OF
    from sessions_app.channel_kinds import PLATFORM_CHANNELS

    assert set(PLATFORM_OF) == PLATFORM_CHANNELS


def test_a_part_read_before_another_send_tried_it_is_not_sent_again_by_that_read(world, telegram, platform):
    """A send reads its reply's parts before it takes the bot's gate. When another send of
    the same reply (its retry, the sweeper's) tries the part and fails for now while the
    first waits, the first must not send the part again with what it read: that try would
    not be counted (the retries would not run out when they should), and it would go
    ahead of the platform's Retry-After."""
    from channels_app import sending
    from channels_app.send_gate import send_gate

    from .conftest import replies_waiting

    pair(world, "telegram", "42", world.alice)
    platform.default(r"sendMessage", Canned(status=503, body={"ok": False}, headers={"Retry-After": "0"}))
    (reply_,) = replies_waiting(world, telegram, ["Hello."])
    read_first = sending._sendable(tenant_id=world.tenant_a.pk, message_id=reply_.pk)  # the waiting send's read
    with pytest.raises(sending.RetryLater):
        sending.deliver_message(tenant_id=world.tenant_a.pk, message_id=reply_.pk, worker="w1")
    with send_gate(binding_id=telegram.pk, worker="w2") as gates:
        assert sending._send_parts(read_first, gates)[0] == 0
    row = OutboundDelivery.objects.get(message=reply_)
    assert (row.state, row.attempts) == ("pending", 1)
    assert len(platform.sent("sendMessage")) == 1
