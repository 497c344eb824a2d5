"""Sessions, messages and images in the admin: read-only for everyone, and a tenant admin
sees only their own tenants' conversations."""
from __future__ import annotations

from dataclasses import dataclass

import pytest
from django.contrib.messages import get_messages
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from sessions_app.models import Image, Message, MovedThread, Session
from sessions_app.services.answers import message_answer_fail
from sessions_app.services.append import message_append
from sessions_app.services.resolve import session_resolve
from sessions_app.thread_moves import group_thread_move


pytestmark = pytest.mark.django_db


@dataclass
class Conversations:
    acme: Session
    globex: Session
    acme_message: Message
    globex_message: Message
    acme_image: Image
    globex_image: Image


@pytest.fixture
def conversations(world) -> Conversations:
    acme = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    acme_message = message_append(session=acme, role="user", content="Alice's bike is a Brompton", channel="web",
                                  sender_name="Alice").message
    message_append(session=acme, role="assistant", content="Noted: a folding bike.", channel="web")
    globex = session_resolve(tenant=world.tenant_b, qor=world.qor_b, channel="web", user=world.charlie)
    globex_message = message_append(session=globex, role="user", content="Globex's secret plans", channel="web",
                                    sender_name="Charlie").message
    return Conversations(
        acme=acme, globex=globex, acme_message=acme_message, globex_message=globex_message,
        acme_image=Image.objects.create(tenant=world.tenant_a, message=acme_message, mime_type="image/png",
                                        data="aGk=", size=2),
        globex_image=Image.objects.create(tenant=world.tenant_b, message=globex_message, mime_type="image/webp",
                                          data="aGk=", size=2),
    )


def url(name: str, *args) -> str:
    return reverse(f"admin:sessions_app_{name}", args=args)


def listed(response) -> list:
    assert response.status_code == 200
    return list(response.context["cl"].result_list)


def assert_not_found(client, name: str, pk: int) -> None:
    """A row of another tenant answers exactly like a row that does not exist."""
    missing = client.get(url(name, 10**9))
    foreign = client.get(url(name, pk))
    assert (foreign.status_code, foreign.url) == (missing.status_code, missing.url) == (302, reverse("admin:index"))
    assert any(f"“{pk}” doesn’t exist" in str(m) for m in get_messages(foreign.wsgi_request))


def test_a_tenant_admin_lists_only_their_tenants_sessions_messages_and_images(tenant_admin, conversations):
    sessions = tenant_admin.get(url("session_changelist"))
    assert listed(sessions) == [conversations.acme]
    assert "globex" not in sessions.content.decode()  # neither a row nor a tenant filter choice

    messages = tenant_admin.get(url("message_changelist"))
    assert [m.content for m in listed(messages)] == ["Alice's bike is a Brompton", "Noted: a folding bike."]
    page = messages.content.decode()
    assert "Brompton" in page and "secret plans" not in page

    images = tenant_admin.get(url("image_changelist"))
    assert listed(images) == [conversations.acme_image]
    assert "image/webp" not in images.content.decode() and "globex" not in images.content.decode()


def test_the_all_messages_link_shows_only_the_tenant_admins_messages(tenant_admin, conversations):
    page = tenant_admin.get(url("session_change", conversations.acme.pk))
    assert page.status_code == 200
    html = page.content.decode()
    link = url("message_changelist") + f"?session__id__exact={conversations.acme.pk}"
    assert f"<a href='{link}'>All 2 messages</a>" in html
    assert "Alice&#x27;s bike is a Brompton" in html
    assert [m.seq for m in listed(tenant_admin.get(link))] == [1, 2]

    # The same link made for another tenant's session lists nothing.
    foreign = tenant_admin.get(url("message_changelist") + f"?session__id__exact={conversations.globex.pk}")
    assert listed(foreign) == []
    assert "secret plans" not in foreign.content.decode()


def test_another_tenants_session_message_or_image_is_not_found(tenant_admin, conversations):
    for name, pk in [("session_change", conversations.globex.pk), ("session_history", conversations.globex.pk),
                     ("message_change", conversations.globex_message.pk),
                     ("image_change", conversations.globex_image.pk)]:
        assert_not_found(tenant_admin, name, pk)
    own = tenant_admin.get(url("message_change", conversations.acme_message.pk))
    assert own.status_code == 200 and "Alice&#x27;s bike is a Brompton" in own.content.decode()


def test_a_tenant_admin_can_neither_change_nor_delete_conversations(tenant_admin, conversations):
    page = tenant_admin.get(url("session_change", conversations.acme.pk)).content.decode()
    assert 'name="_save"' not in page and 'name="state"' not in page  # a view, not a form
    assert tenant_admin.get(url("session_add")).status_code == 403
    assert tenant_admin.get(url("message_add")).status_code == 403
    for name, pk in [("session_delete", conversations.acme.pk), ("message_delete", conversations.acme_message.pk),
                     ("image_delete", conversations.acme_image.pk)]:
        assert tenant_admin.get(url(name, pk)).status_code == 403

    changelist = tenant_admin.get(url("message_changelist")).content.decode()
    assert "delete_selected" not in changelist
    tenant_admin.post(url("message_changelist"), {"action": "delete_selected",
                                                  "_selected_action": [conversations.acme_message.pk]})
    tenant_admin.post(url("session_change", conversations.acme.pk), {"state": "archived"})
    conversations.acme.refresh_from_db()
    assert conversations.acme.state == "active"
    assert Message.objects.filter(session=conversations.acme).count() == 2


def test_a_plain_member_gets_no_conversations(client, world, conversations):
    world.bob.is_staff = True
    world.bob.save(update_fields=["is_staff"])
    client.force_login(world.bob)  # a member of acme, not an admin of it
    assert client.get(url("session_changelist")).status_code == 403
    assert client.get(url("message_changelist")).status_code == 403


def test_a_superuser_sees_every_tenants_conversations_still_read_only(host, conversations):
    assert set(listed(host.get(url("session_changelist")))) == {conversations.acme, conversations.globex}
    assert len(listed(host.get(url("message_changelist")))) == 3
    page = host.get(url("session_change", conversations.globex.pk))
    assert page.status_code == 200 and "Globex&#x27;s secret plans" in page.content.decode()
    assert 'name="_save"' not in page.content.decode()
    assert host.get(url("session_add")).status_code == 403


def test_channels_read_in_the_admin_as_on_the_chat_page(tenant_admin, world, conversations):
    message_append(session=conversations.acme, role="user", content="from a Slack DM", channel="slack_dm")
    message_append(session=conversations.acme, role="user", content="from the terminal", channel="tui")
    page = tenant_admin.get(url("message_changelist")).content.decode()
    assert '<td class="field-channel">Slack</td>' in page and '<td class="field-channel">Terminal</td>' in page


PROVIDER_TEXT = ("AuthenticationError: Error code: 401 - Incorrect API key provided: sk-host-9f3a…c0de "
                 "(https://llm.internal.host.example:8443/v1)")
NOTICE_TEXT = "I can't reach a working model: its settings need fixing by whoever runs this workspace."


@pytest.fixture
def failed(conversations) -> Message:
    """Alice's message the Qor could not answer: the provider's words on the row, and the
    notice she was shown after it."""
    message = conversations.acme_message
    message_answer_fail(message=message, error=PROVIDER_TEXT)
    message_append(session=conversations.acme, role="system", content=NOTICE_TEXT, channel="web",
                   metadata={"notice": "model_misconfigured", "reply_to": message.seq})
    return message


def test_a_tenant_admin_sees_the_notice_a_failed_message_got_and_not_the_providers_words(tenant_admin, failed):
    page = tenant_admin.get(url("message_change", failed.pk)).content.decode()
    assert "sk-host-9f3a" not in page and "llm.internal" not in page and "Error code" not in page
    assert NOTICE_TEXT.replace("'", "&#x27;") in page and ">Failed<" in page


def test_the_host_sees_the_providers_words_on_a_failed_message(host, failed):
    page = host.get(url("message_change", failed.pk)).content.decode()
    assert "Incorrect API key provided: sk-host-9f3a…c0de" in page


def test_the_images_list_does_not_load_the_attachments_themselves(host, conversations):
    # A page lists 100 attachments of up to QORVEN_MAX_UPLOAD each: their data is not shown, so not read.
    with CaptureQueriesContext(connection) as captured:
        assert len(listed(host.get(url("image_changelist")))) == 2
    assert not [q["sql"] for q in captured.captured_queries if '"sessions_app_image"."data"' in q["sql"]]


@pytest.fixture
def moves(world) -> dict[str, MovedThread]:
    """A Telegram group of each tenant upgraded to a supergroup (a new chat id)."""
    for tenant, qor, old, new in ((world.tenant_a, world.qor_a, "-1001", "-1009001"),
                                  (world.tenant_b, world.qor_b, "-2002", "-1009002")):
        group = session_resolve(tenant=tenant, qor=qor, channel="telegram", thread_id=old, group=True)
        message_append(session=group, role="user", content="before the upgrade", channel="telegram")
        group_thread_move(tenant=tenant, qor=qor, channel="telegram", old_thread=old, new_thread=new)
    return {m.tenant.slug: m for m in MovedThread.objects.select_related("tenant")}


def test_a_tenant_admin_reads_only_their_tenants_moved_group_chats_and_changes_none(tenant_admin, moves):
    listing = tenant_admin.get(url("movedthread_changelist"))
    assert listed(listing) == [moves["acme"]]
    page = listing.content.decode()
    assert "-1001" in page and "-1009001" in page
    assert "-2002" not in page and "-1009002" not in page and "globex" not in page
    assert_not_found(tenant_admin, "movedthread_change", moves["globex"].pk)

    own = tenant_admin.get(url("movedthread_change", moves["acme"].pk))
    assert own.status_code == 200 and 'name="_save"' not in own.content.decode()
    assert tenant_admin.get(url("movedthread_add")).status_code == 403
    assert tenant_admin.get(url("movedthread_delete", moves["acme"].pk)).status_code == 403
    tenant_admin.post(url("movedthread_change", moves["acme"].pk), {"new_thread": "-1"})
    assert MovedThread.objects.get(pk=moves["acme"].pk).new_thread == "-1009001"


def test_the_host_reads_every_tenants_moved_group_chats_still_read_only(host, moves):
    assert set(listed(host.get(url("movedthread_changelist")))) == set(moves.values())
    page = host.get(url("movedthread_change", moves["globex"].pk)).content.decode()
    assert "-1009002" in page and 'name="_save"' not in page
    assert host.get(url("movedthread_add")).status_code == 403


def test_a_reply_the_person_had_written_again_is_marked_replaced_in_the_session_and_the_message_list(
    tenant_admin, conversations
):
    """Regenerate keeps the replaced reply: the admin still lists it (nothing is hidden from
    whoever reads the record), marked, so it does not read as the Qor's standing answer."""
    Message.objects.filter(session=conversations.acme, seq=2).update(metadata={"superseded": True})
    again = message_append(session=conversations.acme, role="assistant", content="A Brompton, noted.",
                           channel="web").message

    page = tenant_admin.get(url("session_change", conversations.acme.pk)).content.decode()
    rows = {seq: page.split(f"<tr><td>{seq}</td>", 1)[1].split("</tr>", 1)[0] for seq in (2, again.seq)}
    assert "Noted: a folding bike." in rows[2] and "replaced (written again)" in rows[2]
    assert "A Brompton, noted." in rows[again.seq] and "replaced" not in rows[again.seq]

    listing = tenant_admin.get(url("message_changelist") + f"?session__id__exact={conversations.acme.pk}")
    shown = {m.seq: m for m in listed(listing)}
    assert set(shown) == {1, 2, again.seq}
    cells = listing.content.decode().split("Noted: a folding bike.", 1)[1].split("</tr>", 1)[0]
    assert "replaced (written again)" in cells
    assert "replaced (written again)" not in listing.content.decode().split("A Brompton, noted.", 1)[1].split(
        "</tr>", 1)[0]
