"""Unknown senders pair before they reach the model; approvals are per channel."""
from __future__ import annotations

import io
import json
from datetime import timedelta
from zoneinfo import ZoneInfo

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from channels_app.models import Identity, InboundEvent, PairingRequest
from channels_app.services import binding_create
from sessions_app.models import Message
from tenancy.access import surface_access
from tenancy.services import api_token_create

from ..fakes.model_server import reply
from .payloads import post_telegram, post_whatsapp, telegram_update, whatsapp_body

pytestmark = pytest.mark.django_db(transaction=True)


def codes_sent(platform):
    return [r.json["text"] for r in platform.sent("sendMessage")]


def test_an_unknown_sender_gets_a_code_and_never_reaches_the_model(client, world, telegram, platform, model_server, drain):
    post_telegram(client, telegram_update("hi, who are you?", message_id=1))
    post_telegram(client, telegram_update("hello??", message_id=2))
    drain()
    assert model_server.requests == []
    assert not Message.objects.exists()
    request = PairingRequest.objects.get()  # repeating did not mint a second code
    assert request.state == "pending" and len(request.code) == 6 and request.code.isdigit()
    assert request.expires_at > timezone.now() + timedelta(minutes=55)
    (text,) = codes_sent(platform)  # the second message came within QORVEN_PAIRING_RESEND of the code
    assert request.code in text
    assert Identity.objects.get().approval == "pending"


def test_a_pending_code_is_sent_again_at_most_every_resend_period(client, world, telegram, platform, drain):
    """A forged sender address must not make the Qor write to someone on every message:
    the same code goes out again only once QORVEN_PAIRING_RESEND has passed."""
    from django.core.cache import cache

    for n in range(1, 4):
        post_telegram(client, telegram_update("hello?", message_id=n))
    drain()
    (first,) = codes_sent(platform)
    cache.delete(f"pairing-code-sent:{PairingRequest.objects.get().pk}")  # the resend period has passed
    post_telegram(client, telegram_update("still there?", message_id=4))
    post_telegram(client, telegram_update("and now?", message_id=5))
    drain()
    assert codes_sent(platform) == [first, first]


def test_approving_the_code_admits_the_sender_on_that_channel_only(
    client, world, telegram, whatsapp, platform, model_server, drain
):
    post_telegram(client, telegram_update("hi", user_id=42, message_id=1))
    drain()
    code = PairingRequest.objects.get().code
    out = io.StringIO()
    call_command("pair", "approve", code, "--tenant", "acme", "--user", "alice", stdout=out)
    assert "approved telegram:42 as alice" in out.getvalue()

    model_server.add(reply("Welcome, Priya."))
    post_telegram(client, telegram_update("hi again", user_id=42, message_id=2))
    drain()
    assert [m.content for m in Message.objects.order_by("seq")] == ["hi again", "Welcome, Priya."]
    assert Message.objects.first().session.user == world.alice

    # The same external id on another channel is a stranger until paired there.
    post_whatsapp(client, whatsapp_body("hi", sender="42", message_id="wamid.X"))
    drain()
    assert len(model_server.requests) == 1
    assert PairingRequest.objects.filter(channel="whatsapp", state="pending").count() == 1


def test_approving_without_a_user_makes_one_for_the_sender(client, world, telegram, platform, drain):
    post_telegram(client, telegram_update("hi", user_id=77, first_name="Ravi"))
    drain()
    call_command("pair", "approve", PairingRequest.objects.get().code, "--tenant", "acme", stdout=io.StringIO())
    identity = Identity.objects.get()
    assert identity.user.username == "telegram-ravi"
    assert identity.user.memberships.get().tenant == world.tenant_a
    # A plain member: their messages carry paired trust, from the role, not from a copy of it.
    trust = surface_access(tenant=world.tenant_a, user=identity.user, surface="telegram", cap=identity.trust_level)
    assert trust == "paired"


def test_approving_with_an_empty_user_is_refused_not_read_as_a_new_one(client, world, telegram, platform, drain):
    """`pair approve CODE --user "$U"` with U unset made a new user for the sender, who was
    meant to be linked to someone already there."""
    post_telegram(client, telegram_update("hi", user_id=77, first_name="Ravi"))
    drain()
    with pytest.raises(CommandError, match="--user needs a username"):
        call_command("pair", "approve", PairingRequest.objects.get().code, "--tenant", "acme", "--user", "",
                     stdout=io.StringIO())
    assert PairingRequest.objects.get().state == "pending" and not Identity.objects.filter(user__isnull=False).exists()


def test_a_code_of_one_tenant_cannot_be_approved_in_another(client, world, telegram, platform, drain):
    post_telegram(client, telegram_update("hi"))
    drain()
    code = PairingRequest.objects.get().code
    with pytest.raises(CommandError, match="no pending"):
        call_command("pair", "approve", code, "--tenant", "globex", stdout=io.StringIO())
    assert PairingRequest.objects.get().state == "pending"


def test_denied_senders_get_no_reply(client, world, telegram, platform, model_server, drain):
    post_telegram(client, telegram_update("hi", message_id=1))
    drain()
    call_command("pair", "deny", PairingRequest.objects.get().code, "--tenant", "acme", stdout=io.StringIO())
    post_telegram(client, telegram_update("let me in", message_id=2))
    drain()
    assert len(codes_sent(platform)) == 1 and model_server.requests == []


def test_expired_codes_are_replaced(client, world, telegram, platform, drain):
    post_telegram(client, telegram_update("hi", message_id=1))
    drain()
    PairingRequest.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    post_telegram(client, telegram_update("hi", message_id=2))
    drain()
    states = sorted(PairingRequest.objects.values_list("state", flat=True))
    assert states == ["expired", "pending"]
    with pytest.raises(CommandError):
        call_command("pair", "approve", PairingRequest.objects.get(state="expired").code, "--tenant", "acme",
                     stdout=io.StringIO())


def test_five_wrong_codes_lock_the_sender_for_an_hour(client, world, telegram, platform, drain, settings):
    settings.QORVEN_PAIRING_RESEND = 0  # the code would be sent again at every message: only the lock silences it
    post_telegram(client, telegram_update("hi", message_id=1))
    drain()
    real = PairingRequest.objects.get().code
    wrong = "000000" if real != "000000" else "111111"
    for i in range(5):
        post_telegram(client, telegram_update(wrong, message_id=10 + i))
    drain()
    request = PairingRequest.objects.get()
    assert request.state == "locked" and request.attempts == 5
    assert request.locked_until > timezone.now() + timedelta(minutes=59)
    before = len(codes_sent(platform))
    post_telegram(client, telegram_update("please", message_id=20))
    drain()
    assert len(codes_sent(platform)) == before  # locked: silence


def test_a_locked_out_senders_valid_code_can_still_be_approved_by_the_owner(client, world, telegram, platform, drain):
    from channels_app.pairing import pairing_approve

    post_telegram(client, telegram_update("hi", message_id=1))
    drain()
    real = PairingRequest.objects.get().code
    wrong = "000000" if real != "000000" else "111111"
    for i in range(5):
        post_telegram(client, telegram_update(wrong, message_id=10 + i))
    drain()
    assert PairingRequest.objects.get().state == "locked"
    identity = pairing_approve(tenant=world.tenant_a, code=real, user=world.alice, by=world.alice)
    assert (identity.approval, identity.user) == ("approved", world.alice)
    assert PairingRequest.objects.get().state == "approved"


@pytest.mark.parametrize("mode, replies", [("silent", 0), ("ignore", 0), ("code", 1)])
def test_unpaired_response_setting(client, world, platform, drain, mode, replies):
    binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="telegram", unpaired_response=mode,
                   credentials={"token": "111:AAA", "secret": "tg-secret-a"})
    post_telegram(client, telegram_update("hi"))
    drain()
    assert len(codes_sent(platform)) == replies
    assert PairingRequest.objects.count() == (0 if mode == "ignore" else 1)


def test_the_owner_approves_with_slash_pair_from_a_trusted_surface(client, world, telegram, platform, drain):
    post_telegram(client, telegram_update("hi"))
    drain()
    code = PairingRequest.objects.get().code
    owner = api_token_create(tenant=world.tenant_a, user=world.alice)[1]
    member = api_token_create(tenant=world.tenant_a, user=world.bob)[1]

    def say(token, text):
        client.post("/v1/qors/aria/messages", data=json.dumps({"content": text}),
                    content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {token}")
        drain()
        return Message.objects.filter(role="assistant").order_by("-id").first().content

    assert "Only the owner" in say(member, f"/pair approve {code}")
    assert PairingRequest.objects.get().state == "pending"
    assert code in say(owner, "/pair list")
    assert say(owner, f"/pair approve {code}").startswith("Approved telegram sender")
    request = PairingRequest.objects.get()
    assert (request.state, request.decided_by, request.decided_via) == ("approved", world.alice, "chat:web")


def test_the_owner_links_a_sender_to_their_own_account_or_a_members_with_slash_pair(
    client, world, telegram, platform, drain
):
    from django.contrib.auth import get_user_model

    for user_id, name in ((42, "Alice's phone"), (43, "Bob"), (44, "Mallory")):
        post_telegram(client, telegram_update("hi", user_id=user_id, first_name=name))
    drain()
    code = {r.external_id: r.code for r in PairingRequest.objects.all()}
    owner = api_token_create(tenant=world.tenant_a, user=world.alice)[1]
    users_before = get_user_model().objects.count()

    def say(text):
        client.post("/v1/qors/aria/messages", data=json.dumps({"content": text}),
                    content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {owner}")
        drain()
        return Message.objects.filter(role="assistant").order_by("-id").first().content

    assert say(f"/pair approve {code['42']} me") == "Approved telegram sender Alice's phone, linked to alice."
    assert say(f"/pair approve {code['43']} bob") == "Approved telegram sender Bob, linked to bob."
    # charlie exists, in another workspace: not found, like a name nobody has
    assert say(f"/pair approve {code['44']} charlie").startswith("charlie is not a member here")
    assert say(f"/pair approve {code['44']} nobody").startswith("nobody is not a member here")

    linked = {i.external_id: (i.approval, i.user) for i in Identity.objects.filter(channel="telegram")}
    assert linked["42"] == ("approved", world.alice) and linked["43"] == ("approved", world.bob)
    assert linked["44"] == ("pending", None)
    assert get_user_model().objects.count() == users_before  # nobody new was made


def test_pair_list_shows_pending_requests(client, world, telegram, platform, drain):
    post_telegram(client, telegram_update("hi", first_name="Ravi"))
    drain()
    out = io.StringIO()
    call_command("pair", "list", "--tenant", "acme", stdout=out)
    assert PairingRequest.objects.get().code in out.getvalue() and "Ravi" in out.getvalue()


def test_pair_list_shows_when_a_code_expires_in_the_workspaces_timezone_and_names_it(
    client, world, telegram, platform, drain
):
    """The expiry was UTC with nothing saying so: in Tokyo a code shown as expiring at
    10:15 had expired at 19:15 local time, nine hours before the host read it."""
    world.tenant_a.timezone = "Asia/Tokyo"
    world.tenant_a.save(update_fields=["timezone"])
    post_telegram(client, telegram_update("hi", first_name="Ravi"))
    drain()
    out = io.StringIO()
    call_command("pair", "list", "--tenant", "acme", stdout=out)
    expires = PairingRequest.objects.get().expires_at.astimezone(ZoneInfo("Asia/Tokyo"))
    assert expires.strftime("%Y-%m-%d %H:%M") in out.getvalue()
    assert "Asia/Tokyo" in out.getvalue()


def test_the_log_names_a_paired_or_unpaired_sender_by_identity_not_by_number(
    client, world, whatsapp, platform, model_server, drain, caplog
):
    """A WhatsApp or SMS sender's external id is their phone number, an email sender's
    their address: info lines said `whatsapp:4915112345678 -> user 2`. They name the
    identity's id and channel."""
    from tenancy.models import Membership

    caplog.set_level("INFO")
    number = "4915112345678"
    post_whatsapp(client, whatsapp_body("hi", sender=number, message_id="wamid.A"))
    drain()
    call_command("pair", "approve", PairingRequest.objects.get().code, "--tenant", "acme", "--user", "bob",
                 stdout=io.StringIO())
    Membership.objects.filter(tenant=world.tenant_a, user=world.bob).delete()
    post_whatsapp(client, whatsapp_body("still me", sender=number, message_id="wamid.B"))
    drain()
    identity = Identity.objects.get(external_id=number)
    assert InboundEvent.objects.order_by("pk").last().result == "left"
    lines = [r.getMessage() for r in caplog.records]
    assert not [line for line in lines if number in line or "15112345" in line]
    assert f"pairing approved: whatsapp identity {identity.pk} -> user {world.bob.pk} (via cli)" in lines


def test_phone_numbers_stay_out_of_the_owners_chat_and_the_cli_shows_them_whole(client, world, drain):
    """`/pair list` and `/pair paired` printed a WhatsApp or SMS sender's phone number into
    the owner's chat, where it stays in the history the model reads. Chat shows its last
    four digits; the CLI (and the admin) the whole number, and the code is the same."""
    from channels_app.pairing import identity_get_or_create, pairing_request_for

    waiting = pairing_request_for(identity=identity_get_or_create(
        tenant=world.tenant_a, channel="whatsapp", external_id="15550100777", display_name=""), text="hi").request
    sms = pairing_request_for(identity=identity_get_or_create(
        tenant=world.tenant_a, channel="sms", external_id="+15550102222", display_name="Priya"), text="hi").request
    paired = Identity.objects.create(tenant=world.tenant_a, channel="whatsapp", external_id="15550109999",
                                     user=world.bob, approval=Identity.Approval.APPROVED, display_name="")
    owner = api_token_create(tenant=world.tenant_a, user=world.alice)[1]

    def say(text):
        client.post("/v1/qors/aria/messages", data=json.dumps({"content": text}),
                    content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {owner}")
        drain()
        return Message.objects.filter(role="assistant").order_by("-id").first().content

    listed = say("/pair list")
    assert listed.splitlines() == [f"{waiting.code} — whatsapp …0777", f"{sms.code} — sms Priya"]
    assert say("/pair paired") == f"#{paired.pk} whatsapp …9999 — - (bob)"
    assert say(f"/pair deny {sms.code}") == "Denied sms sender Priya."
    assert say(f"/pair approve {waiting.code}") == "Approved whatsapp sender …0777."
    assert say(f"/pair revoke #{paired.pk}").startswith("Revoked whatsapp sender …9999 (was paired to bob)")
    assert "…0777" in say("/pair paired")  # approved as a new user, named without the number
    said = " ".join(Message.objects.values_list("content", flat=True))
    assert not {"15550100777", "15550102222", "15550109999"} & set(said.replace("+", " ").split())
    assert "0100777" not in said and "0109999" not in said

    out = io.StringIO()
    call_command("pair", "list", "--tenant", "acme", "--paired", stdout=out)
    assert "15550100777" in out.getvalue()


@pytest.mark.parametrize("command", ["list", "approve {code} me", "approve {code}", "deny {code}", "paired",
                                     "revoke telegram 42"])
def test_slash_pair_in_a_group_is_answered_with_where_it_works_and_decides_nothing(
    client, world, telegram, platform, drain, command
):
    """A group is not the owner's own chat: its session has no person, so `/pair approve
    CODE me` there approved the sender as a new user (`me` was nobody) with no one recorded
    as deciding, and the group read the pending codes."""
    from django.contrib.auth import get_user_model

    from .conftest import pair

    post_telegram(client, telegram_update("hi", user_id=55, first_name="Mallory"))
    drain()
    code = PairingRequest.objects.get().code
    pair(world, "telegram", "42", world.alice)  # the owner, paired, writes in a group the bot is in
    users_before = get_user_model().objects.count()
    post_telegram(client, telegram_update(f"/pair@aria_bot {command.format(code=code)}", user_id=42,
                                          first_name="Alice", chat_id=-1009, chat_type="supergroup", message_id=7))
    drain()
    answer = Message.objects.filter(session__kind="group", role="assistant").order_by("-id").first()
    assert answer is not None
    assert answer.content == "/pair works only in your own chat with me, not in a group."
    assert code not in answer.content
    assert PairingRequest.objects.get().state == "pending"
    assert Identity.objects.get(external_id="55").approval == "pending"
    assert Identity.objects.get(external_id="42").approval == "approved"  # the owner's own stays paired
    assert get_user_model().objects.count() == users_before
