"""A binding is saved only when its platform confirms that the credentials given control
the account the webhooks name it by: another tenant's admin can neither take that account
first (with made-up credentials) nor learn that someone has it."""
from __future__ import annotations

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
            "unpaired_response": "code", "enabled": "on", "cred_whatsapp_phone_number_id": "1055",
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
