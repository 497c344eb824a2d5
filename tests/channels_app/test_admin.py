from __future__ import annotations

import pytest
from django.contrib.messages import get_messages
from django.urls import reverse

from channels_app.models import (
    ChannelBinding,
    Identity,
    InboundEvent,
    OutboundDelivery,
    PairingRequest,
)
from channels_app.pairing import identity_get_or_create, pairing_request_for
from channels_app.services import binding_create
from sessions_app.services.append import message_append
from sessions_app.services.resolve import session_resolve
from tenancy.models import Membership, PluginSetting

from ..fakes.platform_server import Canned
from .payloads import post_telegram, telegram_update


@pytest.fixture
def admin_client(client, world):
    world.alice.is_staff = world.alice.is_superuser = True
    world.alice.save(update_fields=["is_staff", "is_superuser"])
    client.force_login(world.alice)
    return client


def test_binding_secrets_never_appear_in_the_admin(admin_client, world, telegram):
    listing = admin_client.get("/admin/channels_app/channelbinding/").content.decode()
    page = admin_client.get(f"/admin/channels_app/channelbinding/{telegram.pk}/change/").content.decode()
    for html in (listing, page):
        assert "111:AAA" not in html and "tg-secret-a" not in html
    assert "secret, token, username" in page  # which keys are set, not their values


def test_the_admin_shows_a_webchat_bindings_embed_and_not_its_secret(admin_client, world):
    binding = binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="webchat", credentials={})
    page = admin_client.get(f"/admin/channels_app/channelbinding/{binding.pk}/change/").content.decode()
    assert f"/webchat/{binding.lookup_key}.js&quot; async&gt;&lt;/script&gt;" in page  # shown as text, to copy
    assert binding.credentials["secret"] not in page


def test_admin_can_replace_one_credential_and_keep_the_others(admin_client, world, telegram):
    response = admin_client.post(f"/admin/channels_app/channelbinding/{telegram.pk}/change/", {
        "tenant": world.tenant_a.pk, "qor": world.qor_a.pk, "name": telegram.name,
        "unpaired_response": "code", "group_answers": "paired", "enabled": "on",
        "cred_telegram_token": "222:BBB", "cred_telegram_secret": "", "cred_telegram_username": "aria_bot",
    })
    assert response.status_code == 302, response.content.decode()[:2000]
    telegram.refresh_from_db()
    assert telegram.credentials == {"token": "222:BBB", "secret": "tg-secret-a", "username": "aria_bot"}


def test_the_binding_form_has_a_field_with_a_hint_for_each_credential_and_never_shows_a_secret(
    admin_client, world, telegram
):
    page = admin_client.get(f"/admin/channels_app/channelbinding/{telegram.pk}/change/")
    form = page.context["adminform"].form
    html = page.content.decode()
    assert {"cred_telegram_token", "cred_telegram_secret", "cred_telegram_username"} <= set(form.fields)
    assert "The bot token from @BotFather (123456789:AAF…)." in html and "Set (hidden). Leave empty to keep it." in html
    assert 'type="password" name="cred_telegram_token"' in html and "111:AAA" not in html
    assert 'name="cred_telegram_username" value="aria_bot"' in html  # not a secret: shown to edit
    assert "Telegram credentials" in html and "new_credentials" not in html and "JSON" not in html


def test_a_binding_added_in_the_admin_gets_its_lookup_key_from_its_credentials(admin_client, world, platform):
    platform.default(r"/whatsapp/v21.0/10555$", Canned(body={"id": "10555"}))  # Meta: the token can use it
    fields = {"tenant": world.tenant_a.pk, "qor": world.qor_a.pk, "kind": "whatsapp", "name": "",
              "unpaired_response": "code", "group_answers": "paired",
              "enabled": "on", "cred_whatsapp_phone_number_id": "10555",
              "cred_whatsapp_token": "EAAG", "cred_whatsapp_app_secret": "", "cred_whatsapp_verify_token": "vt",
              "cred_telegram_token": "ignored: another kind's section"}
    response = admin_client.post("/admin/channels_app/channelbinding/add/", fields)
    assert response.status_code == 200
    assert response.context["adminform"].form.errors["cred_whatsapp_app_secret"] == ["WhatsApp needs this."]
    assert not ChannelBinding.objects.filter(kind="whatsapp").exists()

    response = admin_client.post("/admin/channels_app/channelbinding/add/", {**fields, "cred_whatsapp_app_secret": "as"})
    assert response.status_code == 302, response.content.decode()[:3000]
    binding = ChannelBinding.objects.get(kind="whatsapp")
    assert (binding.lookup_key, binding.name) == ("10555", "whatsapp")
    assert binding.credentials == {"phone_number_id": "10555", "token": "EAAG", "app_secret": "as",
                                   "verify_token": "vt"}
    again = admin_client.post("/admin/channels_app/channelbinding/add/", {**fields, "cred_whatsapp_app_secret": "as"})
    assert "That WhatsApp account is already bound to a Qor." in again.content.decode()


def test_a_binding_the_admin_would_misread_is_refused_at_its_field(admin_client, world):
    fields = {"tenant": world.tenant_a.pk, "qor": world.qor_a.pk, "kind": "email", "name": "",
              "unpaired_response": "code", "group_answers": "paired",
              "enabled": "on", "cred_email_address": "aria@acme.example",
              "cred_email_secret": "s", "cred_email_sender_check": "off"}
    response = admin_client.post("/admin/channels_app/channelbinding/add/", fields)
    assert response.status_code == 200
    assert response.context["adminform"].form.errors["cred_email_sender_check"] == [
        "The sender check is one of dkim, dkim_or_spf, none, not 'off'."]
    assert not ChannelBinding.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_the_admin_approve_action_admits_the_sender(admin_client, world, telegram, platform, drain):
    post_telegram(admin_client, telegram_update("hi", first_name="Ravi"))
    drain()
    pairing = PairingRequest.objects.get()
    admin_client.post("/admin/channels_app/pairingrequest/", {
        "action": "approve", "_selected_action": [pairing.pk]})
    pairing.refresh_from_db()
    assert (pairing.state, pairing.decided_by, pairing.decided_via) == ("approved", world.alice, "admin")
    assert pairing.identity.user.username == "telegram-ravi"
    assert ChannelBinding.objects.count() == 1


# --- A tenant admin: staff, not a superuser, owner of acme; sees acme's rows only. ---

@pytest.fixture
def globex_telegram(world):
    return binding_create(
        tenant=world.tenant_b, qor=world.qor_b, kind="telegram", name="globex-bot",
        credentials={"token": "999:ZZZ", "secret": "tg-secret-b", "username": "globex_bot"},
    )


@pytest.fixture
def pending(world):
    """A pending pairing request in each tenant: Ravi writes to acme, Mallory to globex."""
    def ask(tenant, external_id, name):
        identity = identity_get_or_create(tenant=tenant, channel="telegram", external_id=external_id,
                                          display_name=name)
        return pairing_request_for(identity=identity, text="hi").request

    return {"acme": ask(world.tenant_a, "4242", "Ravi"), "globex": ask(world.tenant_b, "7777", "Mallory")}


def url(name, *args):
    # The switches are tenancy's (app label `qorven`); the rest belongs to channels_app.
    app = "qorven" if name.startswith("pluginsetting") else "channels_app"
    return reverse(f"admin:{app}_{name}", args=args)


def listed(response) -> list:
    assert response.status_code == 200
    return list(response.context["cl"].result_list)


def assert_not_found(client, name, pk) -> None:
    """A row of another tenant answers exactly like a row that does not exist."""
    missing, foreign = client.get(url(name, 10**9)), client.get(url(name, pk))
    assert (foreign.status_code, foreign.url) == (missing.status_code, missing.url) == (302, reverse("admin:index"))
    assert any(f"“{pk}” doesn’t exist" in str(m) for m in get_messages(foreign.wsgi_request))


def test_a_tenant_admin_lists_only_their_tenants_channel_rows(tenant_admin, world, telegram, globex_telegram,
                                                              pending):
    PluginSetting.objects.create(tenant=world.tenant_a, kind="tool", name="web_search", enabled=False)
    PluginSetting.objects.create(tenant=world.tenant_b, kind="tool", name="shell", enabled=False)

    bindings = tenant_admin.get(url("channelbinding_changelist"))
    assert listed(bindings) == [telegram]
    identities = tenant_admin.get(url("identity_changelist"))
    assert [i.external_id for i in listed(identities)] == ["4242"]
    pairings = tenant_admin.get(url("pairingrequest_changelist"))
    assert listed(pairings) == [pending["acme"]]
    plugins = tenant_admin.get(url("pluginsetting_changelist"))
    assert [p.name for p in listed(plugins)] == ["web_search"]
    for page in (bindings, identities, pairings, plugins):
        html = page.content.decode()
        # Not in a row, nor in a tenant filter.
        assert "globex" not in html and "Mallory" not in html and "7777" not in html and "shell" not in html
    assert pending["acme"].code in pairings.content.decode()


def test_another_tenants_channel_rows_are_not_found(tenant_admin, world, telegram, globex_telegram, pending):
    foreign_plugin = PluginSetting.objects.create(tenant=world.tenant_b, kind="tool", name="shell")
    for name, pk in [("channelbinding_change", globex_telegram.pk), ("channelbinding_delete", globex_telegram.pk),
                     ("identity_change", pending["globex"].identity_id),
                     ("pairingrequest_change", pending["globex"].pk), ("pluginsetting_change", foreign_plugin.pk)]:
        assert_not_found(tenant_admin, name, pk)
    assert tenant_admin.get(url("identity_change", pending["acme"].identity_id)).status_code == 200


def test_a_tenant_admin_approves_their_own_pairing_request_in_the_admin(tenant_admin, world, pending):
    response = tenant_admin.post(url("pairingrequest_changelist"), {
        "action": "approve", "_selected_action": [pending["acme"].pk, pending["globex"].pk]}, follow=True)
    assert "Approved 1 request(s)." in [str(m) for m in response.context["messages"]]

    acme = PairingRequest.objects.select_related("identity__user").get(pk=pending["acme"].pk)
    assert (acme.state, acme.decided_by, acme.decided_via) == ("approved", world.alice, "admin")
    assert (acme.identity.approval, acme.identity.user.username) == ("approved", "telegram-ravi")
    assert Membership.objects.filter(tenant=world.tenant_a, user=acme.identity.user).exists()

    globex = PairingRequest.objects.select_related("identity").get(pk=pending["globex"].pk)
    assert (globex.state, globex.decided_by, globex.identity.approval, globex.identity.user) == (
        "pending", None, "pending", None)


def test_a_tenant_admin_links_a_sender_to_their_own_account(tenant_admin, world, pending):
    from django.contrib.auth import get_user_model

    users = get_user_model().objects.count()
    response = tenant_admin.post(url("pairingrequest_changelist"), {
        "action": "approve_as_me", "_selected_action": [pending["acme"].pk]}, follow=True)

    assert "Approved 1 request(s)." in [str(m) for m in response.context["messages"]]
    identity = Identity.objects.get(pk=pending["acme"].identity_id)
    assert (identity.approval, identity.user) == ("approved", world.alice)
    assert get_user_model().objects.count() == users  # no new user


def test_a_tenant_admin_links_a_sender_to_a_member_they_choose_from_their_workspace(tenant_admin, world, pending):
    ask = tenant_admin.post(url("pairingrequest_changelist"), {
        "action": "approve_linking", "_selected_action": [pending["acme"].pk]})
    assert ask.status_code == 200
    page = ask.content.decode()
    assert 'name="member"' in page and "bob" in page and "alice" in page
    assert "charlie" not in page  # another workspace's people are never offered

    refused = tenant_admin.post(url("pairingrequest_changelist"), {
        "action": "approve_linking", "_selected_action": [pending["acme"].pk], "member": world.charlie.pk},
        follow=True)
    assert "Choose a member of the workspace." in [str(m) for m in refused.context["messages"]]
    assert Identity.objects.get(pk=pending["acme"].identity_id).user is None

    done = tenant_admin.post(url("pairingrequest_changelist"), {
        "action": "approve_linking", "_selected_action": [pending["acme"].pk], "member": world.bob.pk}, follow=True)
    assert "Approved 1 request(s)." in [str(m) for m in done.context["messages"]]
    identity = Identity.objects.get(pk=pending["acme"].identity_id)
    assert (identity.approval, identity.user) == ("approved", world.bob)


def test_a_pairing_request_page_is_read_only_and_decided_by_the_actions(tenant_admin, pending):
    page = tenant_admin.get(url("pairingrequest_change", pending["acme"].pk))
    assert page.status_code == 200 and pending["acme"].code in page.content.decode()
    assert 'name="_save"' not in page.content.decode()  # nothing to edit, nothing to save
    listing = tenant_admin.get(url("pairingrequest_changelist")).content.decode()
    assert 'value="approve"' in listing and 'value="deny"' in listing


def test_a_tenant_admin_cannot_decide_another_tenants_pairing_request(tenant_admin, world, pending):
    for action in ("approve", "deny"):
        response = tenant_admin.post(url("pairingrequest_changelist"), {
            "action": action, "_selected_action": [pending["globex"].pk]}, follow=True)
        assert f"{'Approved' if action == 'approve' else 'Denied'} 0 request(s)." in [
            str(m) for m in response.context["messages"]]
    globex = PairingRequest.objects.get(pk=pending["globex"].pk)
    assert (globex.state, globex.decided_at) == ("pending", None)
    assert Identity.objects.get(pk=globex.identity_id).approval == "pending"
    assert not Membership.objects.filter(tenant=world.tenant_b).exclude(user=world.charlie).exists()


def test_a_tenant_admin_cannot_add_pairing_requests_events_or_deliveries(tenant_admin, world, telegram, pending):
    assert tenant_admin.get(url("pairingrequest_add")).status_code == 403
    assert tenant_admin.get(url("inboundevent_add")).status_code == 403
    assert tenant_admin.get(url("outbounddelivery_add")).status_code == 403


def test_inbound_events_and_deliveries_are_scoped_and_read_only(tenant_admin, world, telegram, globex_telegram):
    ours = InboundEvent.objects.create(tenant=world.tenant_a, binding=telegram, external_id="u-1",
                                       payload={"text": "hello from acme"})
    InboundEvent.objects.create(tenant=world.tenant_b, binding=globex_telegram, external_id="u-2",
                                payload={"text": "hello from globex"})
    assert listed(tenant_admin.get(url("inboundevent_changelist"))) == [ours]

    deliveries = {}
    for tenant, qor, user, binding in [(world.tenant_a, world.qor_a, world.alice, telegram),
                                       (world.tenant_b, world.qor_b, world.charlie, globex_telegram)]:
        session = session_resolve(tenant=tenant, qor=qor, channel="telegram", user=user)
        message = message_append(session=session, role="assistant", content="Hi", channel="telegram").message
        deliveries[tenant.slug] = OutboundDelivery.objects.create(tenant=tenant, message=message, part=0,
                                                                  binding=binding, target="42", text="Hi")
    assert listed(tenant_admin.get(url("outbounddelivery_changelist"))) == [deliveries["acme"]]
    assert_not_found(tenant_admin, "outbounddelivery_change", deliveries["globex"].pk)

    page = tenant_admin.get(url("inboundevent_change", ours.pk)).content.decode()
    assert "hello from acme" in page and 'name="_save"' not in page
    assert tenant_admin.get(url("inboundevent_delete", ours.pk)).status_code == 403
    assert tenant_admin.get(url("outbounddelivery_delete", deliveries["acme"].pk)).status_code == 403


def test_a_tenant_admin_sees_no_secret_values_of_a_binding(tenant_admin, world, telegram, globex_telegram):
    listing = tenant_admin.get(url("channelbinding_changelist")).content.decode()
    page = tenant_admin.get(url("channelbinding_change", telegram.pk))
    assert page.status_code == 200
    html = page.content.decode()
    for secret in ("111:AAA", "tg-secret-a", "999:ZZZ", "tg-secret-b"):
        assert secret not in listing and secret not in html
    assert "secret, token, username" in html  # which keys are set, not their values


def test_a_tenant_admins_binding_form_offers_only_their_tenant_and_qors(tenant_admin, world, telegram):
    form = tenant_admin.get(url("channelbinding_add")).context["adminform"].form
    assert list(form.fields["tenant"].queryset) == [world.tenant_a]
    assert list(form.fields["qor"].queryset) == [world.qor_a]
    form = tenant_admin.get(url("channelbinding_change", telegram.pk)).context["adminform"].form
    assert "tenant" not in form.fields  # fixed once made: shown, not offered
    assert list(form.fields["qor"].queryset) == [world.qor_a]

    response = tenant_admin.post(url("channelbinding_change", telegram.pk), {
        "tenant": world.tenant_b.pk, "qor": world.qor_b.pk, "name": "moved",
        "unpaired_response": "code", "group_answers": "paired", "enabled": "on",
    })
    assert response.status_code == 200
    assert set(response.context["adminform"].form.errors) == {"qor"}
    telegram.refresh_from_db()
    assert (telegram.tenant, telegram.qor, telegram.name) == (world.tenant_a, world.qor_a, "telegram")


def test_a_binding_cannot_pair_a_tenant_with_another_tenants_qor(admin_client, world, telegram):
    response = admin_client.post(f"/admin/channels_app/channelbinding/{telegram.pk}/change/", {
        "tenant": world.tenant_a.pk, "qor": world.qor_b.pk, "name": telegram.name,
        "unpaired_response": "code", "group_answers": "paired", "enabled": "on",
    })
    assert response.status_code == 200
    assert response.context["adminform"].form.errors["qor"] == ["This Qor belongs to another tenant."]
    telegram.refresh_from_db()
    assert telegram.qor == world.qor_a


def test_the_tenants_page_cannot_pair_its_binding_with_another_tenants_qor(admin_client, world, telegram):
    """The bindings listed on a tenant's own page follow the binding form's rule: the
    tenant's senders are never answered by another tenant's Qor (its prompt, its project
    context, its MCP servers)."""
    from ..admin_forms import served_form

    change = reverse("admin:qorven_tenant_change", args=[world.tenant_a.pk])
    data = served_form(admin_client.get(change))
    data["bindings-0-qor"] = world.qor_b.pk
    response = admin_client.post(change, data)
    assert response.status_code == 200
    assert "This Qor belongs to another tenant." in response.content.decode()
    telegram.refresh_from_db()
    assert telegram.qor == world.qor_a


def test_a_sender_is_linked_only_to_a_member_of_its_tenant(admin_client, world):
    sender = Identity.objects.create(tenant=world.tenant_a, channel="telegram", external_id="55", user=world.bob,
                                     approval="approved", trust_level="paired", display_name="Bob")
    from ..admin_forms import served_form

    change = url("identity_change", sender.pk)
    response = admin_client.post(change, {**served_form(admin_client.get(change)), "user": world.charlie.pk})
    assert response.status_code == 200
    assert response.context["adminform"].form.errors["user"] == ["This user is not a member of the tenant."]
    assert Identity.objects.get(pk=sender.pk).user == world.bob


def test_a_superuser_sees_every_tenants_channel_rows(host, world, telegram, globex_telegram, pending):
    assert set(listed(host.get(url("channelbinding_changelist")))) == {telegram, globex_telegram}
    assert {i.external_id for i in listed(host.get(url("identity_changelist")))} == {"4242", "7777"}
    assert set(listed(host.get(url("pairingrequest_changelist")))) == {pending["acme"], pending["globex"]}
    assert host.get(url("pairingrequest_change", pending["globex"].pk)).status_code == 200


def test_a_switch_is_named_from_the_real_tools_and_channels(admin_client, world):
    from tenancy.models import PluginSetting

    add = "/admin/qorven/pluginsetting/add/"
    form = admin_client.get(add).context["adminform"].form
    offered = {value for _, group in form.fields["name"].choices for value, _ in group}
    assert {"telegram", "whatsapp", "web", "tui", "webchat", "remember", "memory_search"} <= offered
    typo = admin_client.post(add, {"tenant": world.tenant_a.pk, "kind": "channel", "name": "telegarm", "enabled": ""})
    assert typo.status_code == 200 and "name" in typo.context["adminform"].form.errors
    mixed = admin_client.post(add, {"tenant": world.tenant_a.pk, "kind": "tool", "name": "telegram", "enabled": ""})
    assert "is not a tool" in str(mixed.context["adminform"].form.errors["name"])
    ok = admin_client.post(add, {"tenant": world.tenant_a.pk, "kind": "channel", "name": "web", "enabled": ""})
    assert ok.status_code == 302
    assert PluginSetting.objects.get().name == "web"


def test_the_admins_history_keeps_no_phone_number_or_address_of_a_sender(admin_client, world):
    """The admin's history (django_admin_log) keeps each row's name forever, after the row
    is deleted: an identity's and a pairing request's name was `whatsapp:<their number>`.
    They are named by channel and id; the list and the page still show the number."""
    from django.contrib.admin.models import LogEntry

    from ..admin_forms import served_form

    number = "4915112345678"
    identity = identity_get_or_create(tenant=world.tenant_a, channel="whatsapp", external_id=number,
                                      display_name="Priya")
    pairing = pairing_request_for(identity=identity, text="hi").request
    assert (str(identity), str(pairing)) == (f"whatsapp identity #{identity.pk}",
                                             f"whatsapp pairing #{pairing.pk} (pending)")
    assert number in admin_client.get(url("identity_changelist")).content.decode()
    page = admin_client.get(url("identity_change", identity.pk))
    assert number in page.content.decode()
    assert admin_client.post(url("identity_change", identity.pk), {**served_form(page), "display_name": "P."}
                             ).status_code == 302
    assert admin_client.post(url("identity_delete", identity.pk), {"post": "yes"}).status_code == 302
    assert not Identity.objects.exists()
    names = list(LogEntry.objects.values_list("object_repr", flat=True))
    assert names == [f"whatsapp identity #{identity.pk}"] * 2
