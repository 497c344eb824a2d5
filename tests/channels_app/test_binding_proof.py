"""A binding is saved only when its platform confirms that the credentials given control
the account the webhooks name it by: another tenant's admin can neither take that account
first (with made-up credentials) nor learn that someone has it."""
from __future__ import annotations

import base64
import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from channels_app.models import ChannelBinding

from ..fakes.platform_server import Canned

REFUSED = "WhatsApp did not accept this token for phone number id 1055."


@pytest.fixture
def globex_admin(client, world):
    """The admin as charlie, globex's owner, made staff: a tenant admin of globex only."""
    world.charlie.is_staff = True
    world.charlie.save(update_fields=["is_staff"])
    client.force_login(world.charlie)
    return client


def whatsapp_fields(world, *, token: str) -> dict:
    return {"tenant": world.tenant_b.pk, "qor": world.qor_b.pk, "kind": "whatsapp", "name": "",
            "unpaired_response": "code", "group_answers": "paired",
            "enabled": "on", "cred_whatsapp_phone_number_id": "1055",
            "cred_whatsapp_token": token, "cred_whatsapp_app_secret": "mine", "cred_whatsapp_verify_token": "mine"}


def meta_refuses_the_token(platform) -> None:
    platform.default(r"/whatsapp/v21.0/1055", Canned(status=401, body={"error": {
        "message": "Invalid OAuth access token - Cannot parse access token", "type": "OAuthException", "code": 190}}))


def test_another_tenants_admin_cannot_take_a_whatsapp_number_with_a_made_up_token(globex_admin, world, platform):
    meta_refuses_the_token(platform)
    response = globex_admin.post("/admin/channels_app/channelbinding/add/", whatsapp_fields(world, token="made-up"))
    assert response.status_code == 200
    assert response.context["adminform"].form.non_field_errors() == [REFUSED]
    assert not ChannelBinding.objects.exists()
    assert "Invalid OAuth" not in response.content.decode()  # our words, not Meta's


def test_the_refusal_does_not_say_whether_another_tenant_has_the_number(globex_admin, world, whatsapp, platform):
    meta_refuses_the_token(platform)
    response = globex_admin.post("/admin/channels_app/channelbinding/add/", whatsapp_fields(world, token="made-up"))
    assert response.status_code == 200
    assert response.context["adminform"].form.non_field_errors() == [REFUSED]  # as when nobody has it
    assert "already bound" not in response.content.decode()
    assert list(ChannelBinding.objects.values_list("tenant__slug", flat=True)) == ["acme"]


def meta_confirms(platform, number_id: str = "1055") -> None:
    platform.default(rf"/whatsapp/v21.0/{number_id}$", Canned(body={"id": number_id, "display_phone_number": "+1 555"}))


def test_a_tenant_admin_binds_a_number_their_token_can_use(globex_admin, world, platform):
    meta_confirms(platform)
    response = globex_admin.post("/admin/channels_app/channelbinding/add/", whatsapp_fields(world, token="globex-token"))
    assert response.status_code == 302, response.content.decode()[:2000]
    assert ChannelBinding.objects.get().tenant == world.tenant_b
    (asked,) = platform.sent(r"/whatsapp/v21.0/1055")
    assert (asked.method, asked.headers["Authorization"]) == ("GET", "Bearer globex-token")


def test_already_bound_is_said_only_to_whoever_proves_the_number(globex_admin, world, whatsapp, platform):
    """Meta confirming the token proves globex may use the number: only then is it told
    that another Qor has it."""
    meta_confirms(platform)
    response = globex_admin.post("/admin/channels_app/channelbinding/add/", whatsapp_fields(world, token="real"))
    assert response.context["adminform"].form.non_field_errors() == ["That WhatsApp account is already bound to a Qor."]
    assert ChannelBinding.objects.get() == whatsapp


def test_a_token_meta_answers_for_another_number_proves_nothing(globex_admin, world, platform):
    platform.default(r"/whatsapp/v21.0/1055", Canned(body={"id": "2077"}))
    response = globex_admin.post("/admin/channels_app/channelbinding/add/", whatsapp_fields(world, token="made-up"))
    assert response.context["adminform"].form.non_field_errors() == [REFUSED]
    assert not ChannelBinding.objects.exists()


@pytest.mark.parametrize("canned, says", [
    (Canned(status=503, body={"error": {"message": "Service temporarily unavailable"}}), "HTTP 503"),
    (Canned(status=429, body={}), "HTTP 429"),
    (Canned(reset=True), "unreachable"),
    (Canned(raw=b"<html>proxy</html>"), "could not read"),
])
def test_a_platform_that_cannot_be_asked_saves_nothing(globex_admin, world, platform, canned, says):
    platform.default(r"/whatsapp/v21.0/1055", canned)
    response = globex_admin.post("/admin/channels_app/channelbinding/add/", whatsapp_fields(world, token="t"))
    assert response.status_code == 200
    (error,) = response.context["adminform"].form.non_field_errors()
    assert error.startswith("WhatsApp could not confirm the account (") and says in error
    assert error.endswith("nothing was saved, try again later.")
    assert "temporarily" not in response.content.decode()
    assert not ChannelBinding.objects.exists()


def test_changing_only_a_bindings_name_asks_nothing(globex_admin, world, platform):
    meta_confirms(platform)
    globex_admin.post("/admin/channels_app/channelbinding/add/", whatsapp_fields(world, token="t"))
    binding = ChannelBinding.objects.get()
    platform.default(r"/whatsapp/v21.0/1055", Canned(status=500))
    response = globex_admin.post(f"/admin/channels_app/channelbinding/{binding.pk}/change/", {
        **whatsapp_fields(world, token=""), "name": "support line", "cred_whatsapp_app_secret": ""})
    assert response.status_code == 302, response.content.decode()[:2000]
    binding.refresh_from_db()
    assert binding.name == "support line"
    assert len(platform.sent(r"/whatsapp/")) == 1  # the add's proof only


def test_a_tenant_admin_cannot_move_their_binding_onto_another_number_unproven(globex_admin, world, platform):
    meta_confirms(platform)
    globex_admin.post("/admin/channels_app/channelbinding/add/", whatsapp_fields(world, token="t"))
    binding = ChannelBinding.objects.get()
    platform.default(r"/whatsapp/v21.0/9999", Canned(status=400, body={}))
    response = globex_admin.post(f"/admin/channels_app/channelbinding/{binding.pk}/change/", {
        **whatsapp_fields(world, token=""), "cred_whatsapp_phone_number_id": "9999", "cred_whatsapp_app_secret": ""})
    assert response.context["adminform"].form.non_field_errors() == [
        "WhatsApp did not accept this token for phone number id 9999."]
    binding.refresh_from_db()
    assert binding.lookup_key == "1055"
    assert platform.sent(r"/whatsapp/v21.0/9999")[0].headers["Authorization"] == "Bearer t"  # the stored token


# --- qorven bind ---------------------------------------------------------------------------

WHATSAPP_ARGS = ["whatsapp", "--tenant", "globex", "--qor", "aria", "--phone-number-id", "1055",
                 "--token", "made-up", "--app-secret", "s", "--verify-token", "v"]


def test_qorven_bind_refuses_a_number_meta_does_not_confirm(world, whatsapp, platform):
    meta_refuses_the_token(platform)
    with pytest.raises(CommandError) as refused:
        call_command("bind", *WHATSAPP_ARGS, stdout=io.StringIO())
    assert str(refused.value) == REFUSED  # not that acme has it
    assert list(ChannelBinding.objects.values_list("tenant__slug", flat=True)) == ["acme"]


def test_qorven_bind_says_when_the_platform_cannot_be_asked_and_how_to_bind_offline(world, platform):
    platform.default(r"/whatsapp/v21.0/1055", Canned(status=502))
    with pytest.raises(CommandError, match=r"HTTP 502.*--no-check"):
        call_command("bind", *WHATSAPP_ARGS, stdout=io.StringIO())
    assert not ChannelBinding.objects.exists()


def test_qorven_bind_no_check_binds_without_asking(world, platform):
    call_command("bind", *WHATSAPP_ARGS, "--no-check", stdout=io.StringIO())
    assert ChannelBinding.objects.get().lookup_key == "1055"
    assert platform.requests == []


def test_qorven_bind_asks_nothing_for_incomplete_credentials(world, platform):
    with pytest.raises(CommandError, match="--phone-number-id"):
        call_command("bind", *[a if a != "1055" else "" for a in WHATSAPP_ARGS], stdout=io.StringIO())
    assert platform.requests == []


# --- Slack, Discord, SMS -------------------------------------------------------------------

SLACK_ARGS = ["slack", "--tenant", "globex", "--qor", "aria", "--app-id", "A0APP", "--bot-token", "xoxb-globex",
              "--signing-secret", "s"]
DISCORD_ARGS = ["discord", "--tenant", "globex", "--qor", "aria", "--application-id", "4242",
                "--public-key", "AB12", "--bot-token", "globex-bot"]
SMS_ARGS = ["sms", "--tenant", "globex", "--qor", "aria", "--number", "+15550001111", "--account-sid", "AC9",
            "--auth-token", "globex-token"]


def bind(*args: str) -> None:
    call_command("bind", *args, stdout=io.StringIO())


def refusal(*args: str) -> str:
    with pytest.raises(CommandError) as refused:
        bind(*args)
    assert not ChannelBinding.objects.exists()
    return str(refused.value)


def test_slack_is_bound_when_auth_test_names_the_app(world, platform):
    platform.script(r"/slack/api/auth.test", Canned(body={"ok": True, "team_id": "T1", "app_id": "A0APP"}))
    bind(*SLACK_ARGS)
    assert ChannelBinding.objects.get().lookup_key == "A0APP"
    (asked,) = platform.sent(r"/slack/api/")
    assert asked.headers["Authorization"] == "Bearer xoxb-globex"


def test_slack_names_the_bots_app_through_bots_info(world, platform):
    platform.script(r"/slack/api/auth.test", Canned(body={"ok": True, "team_id": "T1", "bot_id": "B1"}))
    platform.script(r"/slack/api/bots.info", Canned(body={"ok": True, "bot": {"id": "B1", "app_id": "A0APP"}}))
    bind(*SLACK_ARGS)
    assert platform.sent(r"/slack/api/bots.info")[0].path.endswith("?bot=B1")
    assert ChannelBinding.objects.get().lookup_key == "A0APP"


@pytest.mark.parametrize("answers, says", [
    ([Canned(body={"ok": False, "error": "invalid_auth"})], "Slack did not accept this bot token."),
    ([Canned(body={"ok": True, "app_id": "A0OTHER"})], "This bot token is not one of the Slack app A0APP."),
    ([Canned(body={"ok": True, "bot_id": "B1"}), Canned(body={"ok": False, "error": "missing_scope"})],
     "Slack did not say which app this bot token is of (bots.info needs the users:read scope)."),
    ([Canned(body={"ok": False, "error": "ratelimited"})],
     "Slack could not confirm the account (busy); nothing was saved, try again later."
     " (--no-check binds without asking, on your word.)"),
])
def test_slack_refusals(world, platform, answers, says):
    platform.script(r"/slack/api/auth.test", answers[0])
    if len(answers) > 1:
        platform.script(r"/slack/api/bots.info", answers[1])
    assert refusal(*SLACK_ARGS) == says


def test_discord_is_bound_when_the_bot_tokens_application_is_the_one_named(world, platform):
    platform.script(r"/discord/api/v10/applications/@me", Canned(body={"id": "4242", "verify_key": "ab12"}))
    bind(*DISCORD_ARGS)
    assert ChannelBinding.objects.get().lookup_key == "4242"
    assert platform.sent(r"/applications/@me")[0].headers["Authorization"] == "Bot globex-bot"


@pytest.mark.parametrize("answer, says", [
    (Canned(status=401, body={"message": "401: Unauthorized", "code": 0}), "Discord did not accept this bot token."),
    (Canned(body={"id": "9999", "verify_key": "ab12"}), "This bot token is not the bot of the Discord application 4242."),
    (Canned(body={"id": "4242", "verify_key": "cd34"}), "The public key is not the Discord application 4242's."),
])
def test_discord_refusals(world, platform, answer, says):
    platform.script(r"/discord/api/v10/applications/@me", answer)
    assert refusal(*DISCORD_ARGS) == says


def test_sms_is_bound_when_the_twilio_account_owns_the_number(world, platform):
    platform.script(r"/twilio/2010-04-01/Accounts/AC9/IncomingPhoneNumbers.json", Canned(body={
        "incoming_phone_numbers": [{"sid": "PN1", "phone_number": "+15550001111"}]}))
    bind(*SMS_ARGS)
    assert ChannelBinding.objects.get().lookup_key == "+15550001111"
    (asked,) = platform.sent(r"/twilio/")
    assert asked.path.endswith("IncomingPhoneNumbers.json?PhoneNumber=%2B15550001111")
    assert asked.headers["Authorization"] == "Basic " + base64.b64encode(b"AC9:globex-token").decode()


SHORT_CODE_ARGS = [*SMS_ARGS[:6], "894546", *SMS_ARGS[7:]]


def test_sms_on_a_short_code_is_bound_when_the_twilio_account_owns_it(world, platform):
    """A short code is not among the account's incoming phone numbers but its short codes."""
    platform.script(r"/twilio/2010-04-01/Accounts/AC9/SMS/ShortCodes.json", Canned(body={
        "short_codes": [{"sid": "SC1", "short_code": "894546"}]}))
    bind(*SHORT_CODE_ARGS)
    assert ChannelBinding.objects.get().lookup_key == "894546"
    (asked,) = platform.sent(r"/twilio/")
    assert asked.path.endswith("/SMS/ShortCodes.json?ShortCode=894546")
    assert asked.headers["Authorization"] == "Basic " + base64.b64encode(b"AC9:globex-token").decode()


def test_sms_on_a_short_code_the_twilio_account_does_not_have_is_refused(world, platform):
    platform.script(r"/twilio/", Canned(body={"short_codes": []}))
    assert refusal(*SHORT_CODE_ARGS) == "The Twilio account AC9 has no short code 894546."


@pytest.mark.parametrize("answer, says", [
    (Canned(status=401, body={"code": 20003, "message": "Authenticate"}),
     "Twilio did not accept this account SID and auth token."),
    (Canned(body={"incoming_phone_numbers": []}), "The Twilio account AC9 has no incoming number +15550001111."),
])
def test_sms_refusals(world, platform, answer, says):
    platform.script(r"/twilio/", answer)
    assert refusal(*SMS_ARGS) == says


def test_the_admin_form_asks_slack_discord_and_twilio_too(globex_admin, world, platform):
    base = {"tenant": world.tenant_b.pk, "qor": world.qor_b.pk, "name": "", "unpaired_response": "code",
            "group_answers": "paired", "enabled": "on"}
    platform.default(r"/slack/api/auth.test", Canned(body={"ok": False, "error": "invalid_auth"}))
    platform.default(r"/discord/", Canned(status=401, body={}))
    platform.default(r"/twilio/", Canned(status=401, body={}))
    for kind, fields, says in [
        ("slack", {"app_id": "A0APP", "bot_token": "x", "signing_secret": "s"}, "Slack did not accept this bot token."),
        ("discord", {"application_id": "4242", "public_key": "ab", "bot_token": "x"},
         "Discord did not accept this bot token."),
        ("sms", {"number": "+15550001111", "account_sid": "AC9", "auth_token": "x"},
         "Twilio did not accept this account SID and auth token."),
    ]:
        response = globex_admin.post("/admin/channels_app/channelbinding/add/", {
            **base, "kind": kind, **{f"cred_{kind}_{k}": v for k, v in fields.items()}})
        assert response.context["adminform"].form.non_field_errors() == [says]
    assert not ChannelBinding.objects.exists()


@pytest.mark.parametrize("args", [
    ["telegram", "--tenant", "globex", "--qor", "aria", "--token", "1:A", "--secret", "s"],
    ["email", "--tenant", "globex", "--qor", "aria", "--address", "aria@globex.example", "--secret", "s"],
    ["webchat", "--tenant", "globex", "--qor", "aria"],
])
def test_channels_looked_up_by_a_secret_an_address_or_a_generated_key_ask_nothing(world, platform, args):
    bind(*args)
    assert ChannelBinding.objects.count() == 1 and platform.requests == []
