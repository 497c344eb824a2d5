"""A binding is saved only when its platform confirms that the credentials given control
the account the webhooks name it by: another tenant's admin can neither take that account
first (with made-up credentials) nor learn that someone has it."""
from __future__ import annotations

import pytest

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


@pytest.mark.xfail(strict=True, reason="squatting: a binding is saved without the platform's word")
def test_another_tenants_admin_cannot_take_a_whatsapp_number_with_a_made_up_token(globex_admin, world, platform):
    meta_refuses_the_token(platform)
    response = globex_admin.post("/admin/channels_app/channelbinding/add/", whatsapp_fields(world, token="made-up"))
    assert response.status_code == 200
    assert response.context["adminform"].form.non_field_errors() == [REFUSED]
    assert not ChannelBinding.objects.exists()
    assert "Invalid OAuth" not in response.content.decode()  # our words, not Meta's


@pytest.mark.xfail(strict=True, reason="oracle: the form says the account is bound before asking the platform")
def test_the_refusal_does_not_say_whether_another_tenant_has_the_number(globex_admin, world, whatsapp, platform):
    meta_refuses_the_token(platform)
    response = globex_admin.post("/admin/channels_app/channelbinding/add/", whatsapp_fields(world, token="made-up"))
    assert response.status_code == 200
    assert response.context["adminform"].form.non_field_errors() == [REFUSED]  # as when nobody has it
    assert "already bound" not in response.content.decode()
    assert list(ChannelBinding.objects.values_list("tenant__slug", flat=True)) == ["acme"]
