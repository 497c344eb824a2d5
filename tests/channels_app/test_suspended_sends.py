"""Replies written before the host suspended a workspace and still waiting for their bot
(a busy bot, a platform's retry-after) are not sent: they end not delivered, as replies to
a person who left do, and resuming the workspace does not send them either."""
from __future__ import annotations

import pytest

from channels_app.models import OutboundDelivery
from channels_app.sweep import sweep
from channels_app.tasks import deliver_message_task
from sessions_app.models import Session
from sessions_app.services.append import message_append
from sessions_app.services.resolve import session_resolve
from tenancy.services import tenant_resume, tenant_suspend

from .conftest import pair, replies_waiting
from .payloads import post_telegram, telegram_update

pytestmark = pytest.mark.django_db(transaction=True)

SENT = r"/telegram/bot111:AAA/sendMessage"


def test_replies_waiting_for_their_bot_are_not_sent_once_the_workspace_is_suspended_nor_after_resume(
        client, world, telegram, platform, drain):
    pair(world, "telegram", "42", world.alice)
    waiting = replies_waiting(world, telegram, ["Your test results: all clear.", "Anything else?"])
    group = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="telegram", thread_id="-1009",
                            group=True)
    said = message_append(session=group, role="assistant", content="Dinner is at eight.", channel="telegram",
                          notify=False).message
    OutboundDelivery.objects.create(tenant=world.tenant_a, message=said, part=0, binding=telegram,
                                    target="-1009", text=said.content)

    tenant_suspend(tenant=world.tenant_a)
    for message in [*waiting, said]:
        deliver_message_task.delay(world.tenant_a.pk, message.pk)
    drain()

    assert platform.sent(SENT) == []
    parts = OutboundDelivery.objects.filter(tenant=world.tenant_a)
    assert {(p.state, p.last_error) for p in parts} == {("failed", "the workspace is suspended")}

    tenant_resume(tenant=world.tenant_a)
    sweep(restart=True)
    drain()
    assert platform.sent(SENT) == []
    # Served again: a new message is answered and sent as ever.
    assert Session.objects.filter(tenant=world.tenant_a).exists()
    post_telegram(client, telegram_update("/status"))
    drain()
    assert len(platform.sent(SENT)) == 1
