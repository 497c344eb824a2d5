"""Message.revision: every UPDATE of a message moves it on, whoever writes it."""
from __future__ import annotations

import pytest
from django.db import connection

from sessions_app.models import Message
from sessions_app.services.append import message_append
from sessions_app.services.resolve import session_resolve

pytestmark = pytest.mark.django_db(transaction=True)


def revision(message: Message) -> int | None:
    return Message.objects.values_list("revision", flat=True).get(pk=message.pk)


def test_every_update_of_a_message_moves_its_revision_on_by_one_and_only_its_own(world):
    session = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    message = message_append(session=session, role="user", content="hello", channel="web").message
    other = message_append(session=session, role="assistant", content="hi", channel="web").message
    assert revision(message) is None  # stored, never updated

    Message.objects.filter(pk=message.pk).update(answer_state=Message.Answer.ANSWERED)
    assert revision(message) == 1
    message.content = "hello there"
    message.save(update_fields=["content"])
    assert revision(message) == 2
    message.save()  # a whole save writes the revision it read (None): the row's still moves on
    assert revision(message) == 3
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {Message._meta.db_table} SET metadata = %s WHERE id = %s", ['{"x": 1}', message.pk])
    assert revision(message) == 4
    assert revision(other) is None
    # The trigger's own write does not count as another update.
    Message.objects.filter(pk__in=[message.pk, other.pk]).update(channel="telegram")
    assert (revision(message), revision(other)) == (5, 1)
