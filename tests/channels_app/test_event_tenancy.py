"""A platform message's event is read and written only as its tenant's: every statement
on the inbound events names the tenant as well as the event, and a task handed another
tenant's event id finds nothing."""
from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from channels_app.inbound import InboundMessage
from channels_app.models import InboundEvent
from qorven.runtime.publish import publishes_held
from sessions_app.models import Message

from ..fakes.model_server import reply
from .conftest import pair
from .payloads import post_telegram, telegram_update

pytestmark = pytest.mark.django_db(transaction=True)

TABLE = InboundEvent._meta.db_table
# Each read, update or delete of the events table, with the alias it goes by (if any).
_USE = re.compile(rf'\b(?:FROM|UPDATE|JOIN)\s+"?{TABLE}"?'
                  r'(?:\s+(?:AS\s+)?(?!(?:WHERE|SET|INNER|LEFT|JOIN|ON|LIMIT|ORDER|GROUP)\b)"?(\w+)"?)?', re.IGNORECASE)


def untenanted(sql: str) -> list[str]:
    """The uses of the events table in `sql` whose WHERE does not name the tenant: the
    stretch from the WHERE after each use up to the next use must compare that use's
    tenant_id (qualified by its alias or table; bare in hand-written SQL)."""
    uses = list(_USE.finditer(sql))
    missing = []
    for i, use in enumerate(uses):
        alias = use.group(1)
        end = uses[i + 1].start() if i + 1 < len(uses) else len(sql)
        where = sql.find("WHERE", use.end(), end)
        if where < 0:
            missing.append(use.group(0))
            continue
        ref = re.escape(alias) if alias else rf'"?{TABLE}"?'
        tenant = re.compile(rf'(?:\b{ref}\.|(?<![\w."]))"?tenant_id"?\s*=')
        if not tenant.search(sql, where, end):
            missing.append(use.group(0))
    return missing


def event_statements(*captures: CaptureQueriesContext) -> list[str]:
    """What the captures ran on the events table, but the webhook's INSERT (its rows carry
    their tenant)."""
    return [q["sql"] for c in captures for q in c.captured_queries
            if TABLE in q["sql"] and not q["sql"].lstrip().upper().startswith(f'INSERT INTO "{TABLE.upper()}"')]


def test_untenanted_finds_a_statement_by_id_alone():
    assert untenanted(f'UPDATE "{TABLE}" SET "state" = \'done\' WHERE "{TABLE}"."id" = 1')
    assert untenanted(f"UPDATE {TABLE} SET state = 'done' WHERE id = 1 AND EXISTS (SELECT 1 FROM inserted)")
    assert not untenanted(f"UPDATE {TABLE} SET state = 'done' WHERE id = 1 AND tenant_id = 2")
    assert untenanted(f'SELECT U0."id" FROM "{TABLE}" U0 WHERE U0."id" = 1 AND U1."tenant_id" = 2')


def test_every_statement_of_a_telegram_message_on_its_event_names_the_tenant(
    client, world, telegram, platform, model_server
):
    """From the webhook to the reply sent: the event read, claimed and marked done (on
    PostgreSQL by the statement storing the message) by its tenant and id together."""
    from channels_app.tasks import inbound_process_task

    pair(world, "telegram", "42", world.alice)
    model_server.add(reply("Not much."))
    # The task is run below, on this thread, where its statements are seen.
    with CaptureQueriesContext(connection) as webhook, publishes_held():
        assert post_telegram(client, telegram_update("what is up?")).status_code == 200
    event = InboundEvent.objects.get()
    with CaptureQueriesContext(connection) as task:
        assert inbound_process_task.apply(args=(world.tenant_a.pk, event.pk)).result == "accepted"
    (sent,) = platform.sent(r"/telegram/bot111:AAA/sendMessage")
    assert sent.json["text"] == "Not much."
    event.refresh_from_db()
    assert (event.state, event.result, event.payload) == (InboundEvent.State.DONE, "accepted", {})
    statements = event_statements(webhook, task)
    assert len(statements) >= 2  # read and claimed, at least
    assert [(s, untenanted(s)) for s in statements if untenanted(s)] == []


def test_a_senders_earlier_message_taken_first_and_one_that_fails_name_the_tenant(
    client, world, telegram, platform, model_server, drain
):
    """The task for a sender's second message takes the first, still waiting, before it;
    an event that cannot be read is marked failed: by tenant and id, every statement."""
    from channels_app.tasks import inbound_process_task

    pair(world, "telegram", "42", world.alice)
    model_server.add(reply("One."), reply("Two."))
    with publishes_held():
        for n, text in ((1, "first"), (2, "second")):
            assert post_telegram(client, telegram_update(text, message_id=n)).status_code == 200
    first, second = InboundEvent.objects.order_by("pk")
    broken = InboundEvent.objects.create(tenant=world.tenant_a, binding=telegram, external_id="42:9", sender_id="42",
                                         payload={"channel": "telegram"})  # no message in it
    with CaptureQueriesContext(connection) as task:
        assert inbound_process_task.apply(args=(world.tenant_a.pk, second.pk)).result == "accepted"
        assert inbound_process_task.apply(args=(world.tenant_a.pk, first.pk)).result == "accepted"
        assert inbound_process_task.apply(args=(world.tenant_a.pk, broken.pk)).result == "error"
    drain()  # a reply planned before the turn went on to the next message goes from the send task
    assert [s.json["text"] for s in platform.sent(r"/telegram/bot111:AAA/sendMessage")] == ["One.", "Two."]
    assert list(InboundEvent.objects.order_by("pk").values_list("state", flat=True)) == ["done", "done", "failed"]
    statements = event_statements(task)
    assert len(statements) >= 6
    assert [(s, untenanted(s)) for s in statements if untenanted(s)] == []


def test_the_task_for_another_tenant_given_an_events_id_leaves_it_untouched(world, telegram, platform,
                                                                           model_server):
    """Tenant B's task handed tenant A's event id (also as the event it had claimed) finds
    nothing: the event stays pending as stored, nothing is stored or answered."""
    from channels_app.tasks import inbound_process_task

    pair(world, "telegram", "42", world.alice)
    model_server.add(reply("Not much."))
    message = InboundMessage(channel="telegram", external_id="42:1", sender_id="42", sender_name="Alice",
                             text="what is up?", reply_target="42")
    event = InboundEvent.objects.create(tenant=world.tenant_a, binding=telegram, external_id=message.external_id,
                                        sender_id="42", payload=message.model_dump(mode="json"))
    stored = InboundEvent.objects.values().get(pk=event.pk)
    assert inbound_process_task.apply(args=(world.tenant_b.pk, event.pk)).result == "missing"
    assert inbound_process_task.apply(args=(world.tenant_b.pk, event.pk), kwargs={"reclaim": event.pk}
                                      ).result == "missing"
    assert InboundEvent.objects.values().get(pk=event.pk) == stored
    assert not Message.objects.exists()
    assert model_server.requests == []
    assert platform.sent(r"sendMessage") == []



def test_the_events_writes_still_find_their_row_by_primary_key(client, world, telegram, platform, model_server,
                                                              drain):
    """The tenant is one more condition on the row the id finds: among two tenants' events
    (most of them done, as a running server has them), the claim, the done and the failed
    mark are each an UPDATE by primary key on either database."""
    from channels_app.services import binding_create
    from channels_app.tasks import inbound_process_task

    from ..query_plans import query_plan

    theirs = binding_create(tenant=world.tenant_b, qor=world.qor_b, kind="telegram",
                            credentials={"token": "222:BBB", "secret": "tg-secret-b", "username": "globex_bot"})
    InboundEvent.objects.bulk_create(
        InboundEvent(tenant_id=binding.tenant_id, binding=binding, external_id=f"old-{n}", sender_id=f"old-{n % 40}",
                     payload={}, state=InboundEvent.State.PENDING if n % 50 == 0 else InboundEvent.State.DONE)
        for n in range(2000) for binding in (telegram, theirs))
    with connection.cursor() as cursor:
        cursor.execute(f'ANALYZE "{TABLE}"')
    pair(world, "telegram", "42", world.alice)
    model_server.add(reply("One."))
    with publishes_held():
        assert post_telegram(client, telegram_update("first", message_id=1)).status_code == 200
    event = InboundEvent.objects.get(external_id="42:1")
    broken = InboundEvent.objects.create(tenant=world.tenant_a, binding=telegram, external_id="42:9", sender_id="42",
                                         payload={"channel": "telegram"})  # no message in it
    with CaptureQueriesContext(connection) as task:
        assert inbound_process_task.apply(args=(world.tenant_a.pk, event.pk)).result == "accepted"
        assert inbound_process_task.apply(args=(world.tenant_a.pk, broken.pk)).result == "error"
    drain()
    writes = [s for s in event_statements(task) if not s.startswith("SELECT")]
    assert len(writes) == 4  # claimed and done, claimed and failed
    by_key = "channels_app_inboundevent_pkey" if connection.vendor == "postgresql" else "USING INTEGER PRIMARY KEY"
    assert [s[:60] for s in writes if by_key not in query_plan(s)] == []
