"""How many queries the two hottest paths make, so they cannot creep up unnoticed: a
platform webhook (verified, stored, answered 200) and one turn answering one message."""
from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.conf import settings as django_settings
from django.db import connection

from channels_app.inbound import InboundMessage
from channels_app.models import InboundEvent
from qorven.agent.turns import turn_process
from sessions_app.models import Message, Session
from sessions_app.services.append import message_append
from sessions_app.services.resolve import session_resolve

from ..fakes.model_server import reply, tool_call
from .payloads import email_body, post_email, post_telegram, telegram_update

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def kept_rows_stay_kept(settings):
    """What the process keeps (MCP servers, skills, model fallbacks) stays kept through each
    test: the budgets count a turn's statements, not QORVEN_ROUTE_CACHE_SECONDS running out
    (5 s, which a loaded machine's first turn can take; tests/tenancy/test_kept_rows.py
    covers the expiry)."""
    settings.QORVEN_ROUTE_CACHE_SECONDS = 3600.0


def test_a_webhook_is_three_queries(client, world, telegram, django_assert_max_num_queries):
    with django_assert_max_num_queries(3) as captured:  # the binding, its channel switch, the event
        assert post_telegram(client, telegram_update("hello")).status_code == 200
    assert InboundEvent.objects.count() == 1
    assert "INSERT" in captured.captured_queries[-1]["sql"].upper()


def test_an_email_to_an_address_read_lately_is_one_query(client, world, email, django_assert_max_num_queries):
    """Its binding comes from the process's cache, as the other platforms' do (it was read
    on every email: two queries)."""
    assert post_email(client, email_body("first", "<q1@example.com>")).status_code == 200
    with django_assert_max_num_queries(1) as captured:  # the event
        assert post_email(client, email_body("second", "<q2@example.com>")).status_code == 200
    assert InboundEvent.objects.count() == 2
    assert "INSERT" in captured.captured_queries[-1]["sql"].upper()


def test_the_chat_page_s_post_and_history_read_the_qor_with_the_chat(client, world, django_assert_max_num_queries):
    """The chat page's next message and its history page: the sign-in (the browser's
    session, its user), the workspace with the person's membership (tenancy.selectors.
    tenant_role_get: were two), the Qor with the person's chat (sessions_app.qor_chat: were
    two, the Qor and then the chat), then the POST's channel switch and the message (its
    trust from the membership just read: it was read again, one statement more); the GET's
    page."""
    client.force_login(world.alice)
    url = "/chat/api/acme/aria/messages"
    assert client.post(url, data=json.dumps({"content": "warm up"}), content_type="application/json").status_code == 201
    with django_assert_max_num_queries(6) as posted:
        sent = client.post(url, data=json.dumps({"content": "hello"}), content_type="application/json")
    assert sent.status_code == 201
    with django_assert_max_num_queries(5) as read:
        page = client.get(url)
    assert [m["content"] for m in page.json()["messages"] if m["role"] == "user"] == ["warm up", "hello"]
    assert page.json()["session_id"] == sent.json()["session_id"]
    for captured in (posted, read):  # the chat is read with the Qor, not on its own
        assert not [q for q in captured.captured_queries
                    if q["sql"].startswith("SELECT") and 'FROM "sessions_app_session"' in q["sql"]]


def test_the_webchat_s_post_and_history_read_the_visitor_with_the_membership(
    client, world, django_assert_max_num_queries
):
    """A signed visitor's next message through the embed and their history page: the
    webchat's binding with its workspace and Qor, the channel switch, the visitor's
    account with their membership (one statement: were two), then the POST's chat and
    message; the GET's chat and page. The POST read the channel switch and the membership
    again as it stored the message (both read just before, in the same request): 8
    statements, now 5; the GET 6, now 5."""
    from channels_app.services import binding_create

    from .test_webchat import KEY, SECRET, URL, send, token_for

    binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="webchat",
                   credentials={"key": KEY, "secret": SECRET, "origins": "https://acme.example"})
    assert send(client, "warm up", token_for("alice")).status_code == 201
    with django_assert_max_num_queries(5) as posted:
        sent = send(client, "hello", token_for("alice"))
    assert sent.status_code == 201
    with django_assert_max_num_queries(5):
        page = client.get(URL, HTTP_X_QORVEN_VISITOR=token_for("alice"))
    assert [m["content"] for m in page.json()["messages"] if m["role"] == "user"] == ["warm up", "hello"]
    assert page.json()["session_id"] == sent.json()["session_id"]
    read = [q["sql"] for q in posted.captured_queries]
    assert sum('FROM "qorven_membership"' in sql for sql in read) == 1, read
    assert sum('FROM "channels_app_pluginsetting"' in sql for sql in read) == 1, read


def test_a_turn_stays_within_its_query_budget(world, model_server, django_assert_max_num_queries):
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    message_append(session=session, role="user", content="what is up?", channel="web", sender_name="Alice",
                   awaits_answer=True, notify=False, metadata={"trust": "owner"})
    model_server.add(reply("Not much."))
    with django_assert_max_num_queries(queries_per_turn()):
        outcome = turn_process(tenant_id=world.tenant_a.pk, session_id=session.pk)
    assert outcome.answered == 1
    assert Message.objects.filter(session=session, role="assistant").get().content == "Not much."


def test_the_turn_task_adds_no_query_to_its_turn(world, model_server, django_assert_max_num_queries):
    """The task around the turn (qorven.agent.tasks.agent_turn) reads nothing more: the
    turn lets go of its session in the statement that finds nothing left to answer."""
    from qorven.agent.tasks import agent_turn

    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    message_append(session=session, role="user", content="what is up?", channel="web", sender_name="Alice",
                   awaits_answer=True, notify=False, metadata={"trust": "owner"})
    model_server.add(reply("Not much."))
    with django_assert_max_num_queries(queries_per_turn()):
        assert agent_turn.apply(args=(world.tenant_a.pk, session.pk)).result == 1
    assert Session.objects.get(pk=session.pk).turn_owner == ""


def test_a_turn_in_a_long_conversation_reads_it_once(world, model_server, django_assert_max_num_queries):
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    for i in range(100):
        message_append(session=session, role="user", content=f"question {i}", channel="web", notify=False)
        message_append(session=session, role="assistant", content=f"answer {i}", channel="web", notify=False)
    message_append(session=session, role="user", content="and now?", channel="web", awaits_answer=True,
                   notify=False, metadata={"trust": "owner"})
    model_server.add(reply("Now this."))
    # All 201 fit the model's window: the prompt reads them in batches of 64, 128 and 256
    # (two reads more than a short conversation's one); the check for compaction after the
    # answer reads only what came after them.
    with django_assert_max_num_queries(queries_per_turn() + 2):
        assert turn_process(tenant_id=world.tenant_a.pk, session_id=session.pk).answered == 1


def test_a_turn_for_a_person_with_no_memories_makes_no_memory_search(
    world, model_server, django_assert_max_num_queries
):
    """A message whose words could find memories, from a person who has none with this Qor
    (a memory of someone else's, and one with another Qor, do not count): no search, the
    turn's read said so (queries_per_turn; the search was a statement more). Once the
    person has one, it is searched for and reaches the prompt."""
    from ..factories.memory_app import remember

    remember(world.tenant_a, world.qor_a, world.bob, "Bob's garden party is on Sunday")
    remember(world.tenant_b, world.qor_b, world.alice, "Alice's garden party is on Saturday")
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    model_server.add(reply("No idea."), reply("Saturday."))
    message_append(session=session, role="user", content="when is my garden party?", channel="web",
                   sender_name="Alice", awaits_answer=True, notify=False, metadata={"trust": "owner"})
    with django_assert_max_num_queries(queries_per_turn()):
        assert turn_process(tenant_id=world.tenant_a.pk, session_id=session.pk).answered == 1
    remember(world.tenant_a, world.qor_a, world.alice, "Alice's garden party is on Saturday")
    message_append(session=session, role="user", content="and the garden party?", channel="web",
                   sender_name="Alice", awaits_answer=True, notify=False, metadata={"trust": "owner"})
    assert turn_process(tenant_id=world.tenant_a.pk, session_id=session.pk).answered == 1
    first, second = ("\n".join(str(m["content"]) for m in request["messages"]) for request in model_server.requests)
    assert "garden party is on" not in first
    assert "Alice's garden party is on Saturday" in second and "Sunday" not in second


def queries_per_turn() -> int:
    """The lease; the pending message with its session, the session's tenant, Qor and
    user, and the tenant's switches, the tools' among them (one read; the switches were a
    read of their own, one statement more), and whether the person has any memory with
    the Qor (no memory search for one who has none: a statement more before); the MCP servers, the skills, the model fallbacks and the window; usage;
    the reply with the lease's confirmation and the answered marks; what came after the
    window, for compaction; the lease let go in the statement that finds nothing left to
    answer. The reply is one statement on PostgreSQL; on SQLite three, with the BEGIN and
    COMMIT it counts."""
    return 10 if connection.vendor == "postgresql" else 14


def test_a_telegram_message_is_answered_and_sent_within_its_query_budget(
    client, world, telegram, platform, model_server, django_assert_max_num_queries
):
    """The task that takes a stored webhook's message reads and writes no more than this,
    its turn and the reply's send included (queries_per_platform_turn)."""
    from channels_app.tasks import inbound_process_task

    from .conftest import pair

    pair(world, "telegram", "42", world.alice)
    model_server.add(reply("Not much."))
    event = _alices_telegram_message(world, telegram, 1, "what is up?")
    with django_assert_max_num_queries(queries_per_platform_turn()):
        assert inbound_process_task.apply(args=(world.tenant_a.pk, event.pk)).result == "accepted"
    (sent,) = platform.sent(r"/telegram/bot111:AAA/sendMessage")
    assert sent.json["text"] == "Not much."


def _alices_telegram_message(world, telegram, n: int, text: str) -> InboundEvent:
    """Alice's `n`th message in her Telegram chat with the Qor, as a webhook stores it."""
    message = InboundMessage(channel="telegram", external_id=f"42:{n}", sender_id="42", sender_name="Alice",
                             text=text, reply_target="42")
    return InboundEvent.objects.create(tenant=world.tenant_a, binding=telegram, external_id=message.external_id,
                                       sender_id="42", payload=message.model_dump(mode="json"))


def queries_per_platform_turn() -> int:
    """The event with its sender's oldest waiting event and its tenant's switches (the
    channel's the rules read: tenancy.switches.switched_off_of; were a read of their own,
    one statement more), and its claim; the
    identity with its user and the user's membership role (its reply target noted: the
    first message);
    the chat (created: the first message) and the message (no look-up first for its
    platform id: the unique index refuses a repeat), with the event done in its statement
    on PostgreSQL (channels_app.event_done: one statement more before, as on SQLite); the
    turn (queries_per_turn, whose tool switches come with its message's
    read); the delivery planned: the parts in one INSERT
    that inserts them only while the account that asked is still paired (in a transaction
    of its own; where the message came from, the task noted as it stored it), with the
    reply's mark of a delivery not yet planned cleared (a reply whose process died before
    planning it is found by that mark and planned by the sweeper, channels_app.sweep: on
    PostgreSQL in the same statement, on SQLite one UPDATE more); the send: the parts with the channel switch, the claim, sent with the next reply
    waiting for the binding (one statement), the next reply waiting once the bot is let go. On PostgreSQL the send's gates (channels_app.send_gate) are advisory
    locks of the connection, not keys in Redis: the bot's gate and a send slot taken in one
    statement, let go in another."""
    return queries_per_turn() + 16  # on PostgreSQL 17 before (the event done), as on SQLite


def test_the_next_turn_reads_nothing_the_process_keeps(world, model_server, django_assert_max_num_queries):
    """A turn after the first in a process reads neither the Qor's MCP servers and model
    fallbacks nor the learned skills (qorven.runtime.row_cache keeps them):
    queries_per_next_turn; the one after it starts from the window it holds:
    queries_per_held_turn."""
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    model_server.add(reply("Not much."), reply("Still not much."), reply("Nothing."))
    for text, budget in (("what is up?", queries_per_turn()), ("and now?", queries_per_next_turn()),
                         ("and then?", queries_per_held_turn())):
        message_append(session=session, role="user", content=text, channel="web", sender_name="Alice",
                       awaits_answer=True, notify=False, metadata={"trust": "owner"})
        with django_assert_max_num_queries(budget):
            assert turn_process(tenant_id=world.tenant_a.pk, session_id=session.pk).answered == 1


def queries_per_next_turn() -> int:
    """queries_per_turn less the MCP servers, the skills and the model fallbacks."""
    return queries_per_turn() - 3


def queries_per_held_turn() -> int:
    """queries_per_next_turn for a conversation whose earlier messages the process holds
    as the last turn's window (qorven.agent.held_windows): what came after them, and their
    check, a read that takes no text. A window that took the whole conversation reads
    nothing older (one read more before)."""
    return queries_per_next_turn() + 1


def test_a_telegram_chat_s_next_message_is_answered_and_sent_within_its_query_budget(
    world, telegram, platform, model_server, django_assert_max_num_queries
):
    """A chat's second message, in a process that has answered one: what a webhook's
    message costs from then on (queries_per_next_platform_turn)."""
    from channels_app.tasks import inbound_process_task

    from .conftest import pair

    pair(world, "telegram", "42", world.alice)
    model_server.add(reply("Hello."), reply("Not much."))
    for n, text in ((1, "what is up?"), (2, "and what is it?")):
        event = _alices_telegram_message(world, telegram, n, text)
        budget = queries_per_platform_turn() if n == 1 else queries_per_next_platform_turn()
        with django_assert_max_num_queries(budget):
            assert inbound_process_task.apply(args=(world.tenant_a.pk, event.pk)).result == "accepted"
    assert [sent.json["text"] for sent in platform.sent(r"/telegram/bot111:AAA/sendMessage")] == ["Hello.", "Not much."]


def queries_per_next_platform_turn() -> int:
    """queries_per_platform_turn for a chat's next message: its turn is queries_per_next_turn
    (its tool switches read with the channel's, as for the first), the chat is found (not
    created) and the reply target is known (not noted). Its reply's mark is cleared as
    for the first."""
    return queries_per_next_turn() + 12  # on PostgreSQL 13 before (the event done)


@pytest.mark.parametrize("sender", ["42", "77"], ids=["member", "stranger"])
def test_a_group_message_not_to_be_answered_reads_its_sender_once(
    world, telegram, model_server, django_assert_max_num_queries, sender
):
    """Who wrote in a group — a member paired with the Qor, or a stranger whose mention is
    kept unanswered — is one read, the identity with its user's membership
    (queries_per_group_context)."""
    from channels_app.tasks import inbound_process_task

    from .conftest import pair

    pair(world, "telegram", "42", world.alice)
    session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="telegram", thread_id="-1009", group=True)
    text = "chatter" if sender == "42" else "@aria_bot hi"
    message = InboundMessage(channel="telegram", external_id="-1009:1", sender_id=sender, sender_name="Carol",
                             text=text, reply_target="-1009", group=True, thread_id="-1009", addressed=sender == "77")
    event = InboundEvent.objects.create(tenant=world.tenant_a, binding=telegram, external_id=message.external_id,
                                        sender_id=sender, payload=message.model_dump(mode="json"))
    with django_assert_max_num_queries(queries_per_group_context()):
        result = inbound_process_task.apply(args=(world.tenant_a.pk, event.pk)).result
    assert result == ("group-context" if sender == "42" else "group-unpaired")
    assert model_server.requests == []


def queries_per_group_context() -> int:
    """The event with its sender's oldest waiting event and the channel switch (one read:
    the switch was a read of its own, one statement more), and its claim; the group's
    session; the sender's identity with its user's membership; the message, with the
    event done in its statement on PostgreSQL (channels_app.event_done; a statement of its
    own on SQLite, and on PostgreSQL before)."""
    return 5 if connection.vendor == "postgresql" else 6


@contextmanager
def _redis_round_trips() -> Iterator[list[str]]:
    """The round trips this process's app makes to its Redis db meanwhile, as MONITOR shows
    them: a command each, a MULTI … EXEC block as one ("MULTI"), a script's own commands
    not at all. Only this run's keys and channels (its cache and layer prefixes)."""
    import redis
    from django.core.cache import cache

    client = redis.Redis.from_url(django_settings.REDIS_URL)
    db = client.connection_pool.connection_kwargs.get("db", 0)
    ours = (cache.make_key(""), django_settings.QORVEN_LIVE_PREFIX, django_settings.QORVEN_LIVE_PREFIX)
    end = "qorven-test-end"
    seen: list[str] = []
    ready = threading.Event()

    def read() -> None:
        in_multi = False
        with client.monitor() as monitor:
            ready.set()
            for command in monitor.listen():
                if command["db"] != db or command.get("client_type") == "lua":
                    continue
                text = command["command"]
                if end in text:
                    return
                name = text.split(" ", 1)[0].upper()
                if name == "MULTI":
                    in_multi = True
                    seen.append("MULTI")
                elif name in ("EXEC", "DISCARD"):
                    in_multi = False
                elif not in_multi and any(prefix in text for prefix in ours):
                    seen.append(name)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    ready.wait(5)
    try:
        yield seen
    finally:
        time.sleep(0.2)  # what was sent last reaches MONITOR before the end mark
        client.echo(end)
        reader.join(10)


@pytest.mark.skipif(not django_settings.REDIS_URL, reason="counts what reaches Redis (REDIS_URL)")
def test_a_web_turn_stays_within_its_redis_round_trips(world, model_server):
    """What a turn answering a web message asks of Redis (redis_round_trips_per_turn), the
    turn task's own included: no look at the session's waiter when it never waited."""
    from qorven.agent.tasks import agent_turn

    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    message_append(session=session, role="user", content="what is up?", channel="web", sender_name="Alice",
                   awaits_answer=True, notify=False, metadata={"trust": "owner"})
    model_server.add(reply("Not much."))
    with _redis_round_trips() as trips:
        assert agent_turn.apply(args=(world.tenant_a.pk, session.pk)).result == 1
    assert len(trips) <= redis_round_trips_per_turn(), " ".join(trips)


def redis_round_trips_per_turn() -> int:
    """The stop flag looked at once (GET); each of the reply's two streamed chunks kept for
    a page that opens meanwhile (a MULTI) and published (PUBLISH); the reply's message.new
    and message.done (a PUBLISH each); the stream's text forgotten and the stop flag
    cleared (one script call, EVALSHA: the flag's DEL was a round trip of its own, 9 in
    all). Was 10 before that, with a GET of the session's waiter marker after every turn
    (qorven.agent.tasks.agent_turn)."""
    return 8


@pytest.mark.skipif(not django_settings.REDIS_URL, reason="counts what reaches Redis (REDIS_URL)")
def test_a_telegram_chat_s_next_message_stays_within_its_redis_round_trips(world, telegram, platform, model_server):
    """What the task answering a Telegram chat's next message asks of Redis, its turn and
    the reply's send included (redis_round_trips_per_platform_turn)."""
    from channels_app.tasks import inbound_process_task

    from .conftest import pair

    pair(world, "telegram", "42", world.alice)
    model_server.add(reply("Hello."), reply("Not much."))
    for n, text in ((1, "what is up?"), (2, "and what is it?")):
        event = _alices_telegram_message(world, telegram, n, text)
        with _redis_round_trips() as trips:
            assert inbound_process_task.apply(args=(world.tenant_a.pk, event.pk)).result == "accepted"
    assert len(trips) <= redis_round_trips_per_platform_turn(), " ".join(trips)
    assert [sent.json["text"] for sent in platform.sent(r"/telegram/bot111:AAA/sendMessage")] == ["Hello.", "Not much."]


def redis_round_trips_per_platform_turn() -> int:
    """The message's message.new (PUBLISH), then its turn as a web turn's
    (redis_round_trips_per_turn); the reply's send asks nothing of Redis (its gates are
    PostgreSQL's advisory locks: channels_app.send_gate)."""
    return 1 + redis_round_trips_per_turn()


def test_a_turn_that_saves_a_memory_leaves_what_the_process_keeps(world, model_server, django_assert_max_num_queries):
    """A turn in which the model saves a memory (remember) drops none of what the process
    keeps: the next turn reads no MCP server, skill or model fallback (queries_per_next_turn)
    and finds the memory with the one statement more it costs, the search; the person's
    timezone its date is shown in comes with the turn's first read (was a statement more
    whenever memories were found)."""
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    model_server.add(tool_call("remember", {"content": "Alice's bike is a green Brompton", "type": "fact"}),
                     reply("Noted."), reply("A green Brompton."))
    message_append(session=session, role="user", content="my bike is a green Brompton", channel="web",
                   sender_name="Alice", awaits_answer=True, notify=False, metadata={"trust": "owner"})
    assert turn_process(tenant_id=world.tenant_a.pk, session_id=session.pk).answered == 1
    message_append(session=session, role="user", content="what colour is my bike?", channel="web",
                   sender_name="Alice", awaits_answer=True, notify=False, metadata={"trust": "owner"})
    with django_assert_max_num_queries(queries_per_next_turn() + 1) as captured:  # the memory search
        assert turn_process(tenant_id=world.tenant_a.pk, session_id=session.pk).answered == 1
    assert "green Brompton" in "\n".join(str(m["content"]) for m in model_server.requests[-1]["messages"])
    read = "\n".join(q["sql"] for q in captured.captured_queries)
    for kept in ("tenancy_mcpserver", "memory_app_learnedskill", "tenancy_modelfallback"):
        assert kept not in read
