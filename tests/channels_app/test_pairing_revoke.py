"""Ending a pairing without the admin: `qorven pair list --paired` shows a tenant's paired
platform accounts, `qorven pair revoke` takes one's access away (and `/pair revoke` from
the owner's trusted surface). It ends the pairing as the admin does: what the account sent
and is still waiting for a turn is not answered, and nothing more reaches its chat."""
from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from channels_app.models import Identity, OutboundDelivery, PairingRequest
from channels_app.webhook_ingest import group_commit
from qorven.agent.gateway import inbound_accept
from sessions_app.models import Message
from sessions_app.services.resolve import session_resolve
from tenancy.services import api_token_create
from tenancy.trust import Trust

from ..agent.test_membership_mid_turn import HeldModel
from ..fakes.model_server import reply
from ..processes import wait_for
from .conftest import pair, replies_waiting
from .payloads import post_telegram, telegram_update

pytestmark = pytest.mark.django_db(transaction=True)

SENT = r"/telegram/bot111:AAA/sendMessage"


def pair_command(*args: str) -> str:
    out = io.StringIO()
    call_command("pair", *args, stdout=out)
    return out.getvalue()


def paired_rows(table: str) -> list[tuple[str, ...]]:
    """The rows of `pair list --paired`'s table after its identity column."""
    rows = [[cell.strip() for cell in line.split("│")[2:-1]] for line in table.splitlines() if line.count("│") == 6]
    return [tuple(row) for row in rows if row != ["channel", "sender", "name", "user"]]


def test_pair_list_paired_shows_the_tenants_paired_accounts_and_no_one_elses(world):
    pair(world, "telegram", "42", world.alice)
    pair(world, "discord", "777", world.bob)
    Identity.objects.create(tenant=world.tenant_a, channel="telegram", external_id="99", display_name="Stranger")
    Identity.objects.create(tenant=world.tenant_b, channel="telegram", external_id="55", user=world.charlie,
                            approval=Identity.Approval.APPROVED, display_name="Charlie")

    # (channel, sender, name, user) of each row: the identity column holds ids, whose
    # digits may be any sender's.
    assert paired_rows(pair_command("list", "--paired", "--tenant", "acme")) == [
        ("discord", "777", "Bob", "bob"), ("telegram", "42", "Alice", "alice")]
    assert paired_rows(pair_command("list", "--paired", "--tenant", "globex")) == [
        ("telegram", "55", "Charlie", "charlie")]
    Identity.objects.filter(tenant=world.tenant_b).delete()
    assert "No paired accounts." in pair_command("list", "--paired", "--tenant", "globex")


@pytest.mark.parametrize("by", ["channel and sender id", "identity id"])
def test_a_revoked_account_gets_no_answer_to_what_was_waiting_and_nothing_more(client, world, telegram, platform,
                                                                               model_server, drain, by):
    """Alice's Telegram account writes while her page's question is with the model; the
    owner revokes that account from the command line meanwhile. Its message must end unanswered: no model call for it, nothing sent."""
    identity = pair(world, "telegram", "42", world.alice)
    held = HeldModel(reply("Three events this week."), reply("Your bank PIN is in your notes."))
    model_server.default = held
    chat = session_resolve(tenant=world.tenant_a, qor=world.qor_a, channel="web", user=world.alice)
    inbound_accept(session=chat, content="what is on this week?", channel="web", sender_name="Alice",
                   trust=Trust.OWNER)
    assert held.arrived.wait(30), "the turn never called the model"
    assert post_telegram(client, telegram_update("where is my PIN?")).status_code == 200
    assert group_commit.flush(10)
    assert wait_for(lambda: Message.objects.filter(role="user", channel="telegram").exists(), 30)
    waiting = Message.objects.get(role="user", channel="telegram")

    target = ["telegram", "42"] if by == "channel and sender id" else ["--identity", str(identity.pk)]
    text = pair_command("revoke", *target, "--tenant", "acme")
    assert "revoked telegram:42" in text and "1 waiting message" in text
    held.release.set()
    drain()

    waiting.refresh_from_db()
    assert waiting.answer_state == "failed"
    assert held.calls == 1  # the page's question only
    assert platform.sent(SENT) == []
    identity.refresh_from_db()
    assert identity.approval == "denied"

    # What it sends from now on is the words of an account the Qor does not answer.
    assert post_telegram(client, telegram_update("hello again?", message_id=2)).status_code == 200
    drain()
    assert held.calls == 1 and platform.sent(SENT) == []


def test_revoke_dry_run_says_what_would_end_and_changes_nothing(world, telegram):
    identity = pair(world, "telegram", "42", world.alice)
    replies_waiting(world, telegram, ["Your test results: all clear.", "And the invoice."])

    text = pair_command("revoke", "telegram", "42", "--tenant", "acme", "--dry-run")

    assert "would revoke telegram:42" in text and "2 reply part(s)" in text and "nothing changed" in text.lower()
    identity.refresh_from_db()
    assert (identity.approval, identity.user) == ("approved", world.alice)
    assert set(OutboundDelivery.objects.values_list("state", flat=True)) == {"pending"}

    text = pair_command("revoke", "telegram", "42", "--tenant", "acme")
    assert "revoked telegram:42" in text and "2 reply part(s) not sent" in text
    assert set(OutboundDelivery.objects.values_list("state", flat=True)) == {"failed"}


def test_revoke_with_unlink_lets_the_account_ask_for_a_new_code(client, world, telegram, platform, drain):
    """A number given to someone new: unlinked, it is a stranger again and gets a code."""
    identity = pair(world, "telegram", "42", world.alice)
    text = pair_command("revoke", "telegram", "42", "--tenant", "acme", "--unlink")
    assert "unlinked telegram:42" in text
    identity.refresh_from_db()
    assert identity.user is None and identity.approval == "pending"

    post_telegram(client, telegram_update("hi, new phone"))
    drain()
    (sent,) = platform.sent(SENT)
    assert "pairing code" in sent.json["text"]


def test_an_account_of_another_tenant_or_not_paired_is_not_found(world):
    theirs = Identity.objects.create(tenant=world.tenant_b, channel="telegram", external_id="55", user=world.charlie,
                                     approval=Identity.Approval.APPROVED)
    Identity.objects.create(tenant=world.tenant_a, channel="telegram", external_id="99")  # pending: not paired
    for target in (["--identity", str(theirs.pk)], ["telegram", "55"], ["telegram", "99"], ["--identity", "999999"]):
        with pytest.raises(CommandError, match="no paired account") as refused:
            pair_command("revoke", *target, "--tenant", "acme")
        assert refused.value.returncode == 1
    theirs.refresh_from_db()
    assert (theirs.approval, theirs.user) == ("approved", world.charlie)
    with pytest.raises(CommandError, match="either CHANNEL SENDER_ID or --identity"):
        pair_command("revoke", "--tenant", "acme")


def test_the_owner_revokes_with_slash_pair_and_a_member_cannot(client, world, telegram, drain):
    pair(world, "telegram", "42", world.alice)
    theirs = Identity.objects.create(tenant=world.tenant_b, channel="telegram", external_id="55", user=world.charlie,
                                     approval=Identity.Approval.APPROVED)
    owner = api_token_create(tenant=world.tenant_a, user=world.alice)[1]
    member = api_token_create(tenant=world.tenant_a, user=world.bob)[1]

    def say(token, text):
        client.post("/v1/qors/aria/messages", data=json.dumps({"content": text}),
                    content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
        drain()
        return Message.objects.filter(role="assistant").order_by("-id").first().content

    assert "Only the owner" in say(member, "/pair revoke telegram 42")
    assert "telegram 42" in say(owner, "/pair paired") and "telegram 55" not in say(owner, "/pair paired")
    assert say(owner, "/pair revoke telegram 55") == "No paired telegram account 55."
    assert say(owner, "/pair revoke telegram 42").startswith("Revoked telegram sender")
    assert Identity.objects.get(tenant=world.tenant_a, external_id="42").approval == "denied"
    theirs.refresh_from_db()
    assert theirs.approval == "approved"


def test_a_number_given_to_someone_new_starts_their_own_chat_in_legacy_mode(client, world, telegram, platform,
                                                                          model_server, drain, settings):
    """One chat per (channel, sender) with QORVEN_LEGACY_SESSIONS=1: Alice's Telegram
    account, unlinked and paired again to Bob, must not carry Bob into Alice's chat (her
    words in his model's window, her memories, her beats)."""
    settings.QORVEN_LEGACY_SESSIONS = True
    pair(world, "telegram", "42", world.alice)
    model_server.add(reply("Noted."), reply("I have nothing from you before this."))
    post_telegram(client, telegram_update("my bank PIN is 4711"))
    drain()
    assert "unlinked telegram:42" in pair_command("revoke", "telegram", "42", "--tenant", "acme", "--unlink")

    post_telegram(client, telegram_update("hi, new phone", message_id=2))
    drain()
    code = PairingRequest.objects.get(identity__external_id="42", state="pending").code
    pair_command("approve", code, "--tenant", "acme", "--user", "bob")
    post_telegram(client, telegram_update("what did I tell you before?", message_id=3))
    drain()

    asked = Message.objects.get(content="what did I tell you before?")
    assert asked.session.user == world.bob
    assert asked.answer_state == "answered"
    window = json.dumps(model_server.requests[-1]["messages"])
    assert "4711" not in window and "what did I tell you before?" in window
