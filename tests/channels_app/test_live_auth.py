"""A chat socket lives only as long as the sign-in that opened it: signing out in another
tab, a password change, removal from the tenant or a revoked token closes it (a
`signed_out` frame, then close code 4401) — and nobody else's socket."""
from __future__ import annotations

import asyncio
from datetime import timedelta
from importlib import import_module

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.conf import settings
from django.test import Client
from django.utils import timezone

from channels_app.consumers import sign_in
from channels_app.consumers.sign_in import CLOSE_SIGNED_OUT
from qorven.runtime.publisher import broadcast_flush
from tenancy.models import ApiToken, Membership
from tenancy.services import api_token_create

from .live_helpers import communicator, receive_until, session_cookie

pytestmark = pytest.mark.django_db(transaction=True)

ALICE_CHAT = "/ws/chat/acme/aria/"


@pytest.fixture(autouse=True)
def no_recheck_delay(monkeypatch):
    monkeypatch.setattr(sign_in, "RECHECK_DELAY", 0.0)


def signed_in_client(user) -> tuple[Client, str]:
    client = Client()
    client.force_login(user)
    return client, client.cookies["sessionid"].value


async def opened(comm):
    assert (await comm.connect())[0]
    await receive_until(comm, lambda e: e["type"] == "session")
    return comm


async def closed_as_signed_out(comm) -> list[dict]:
    await sync_to_async(broadcast_flush)()
    events = await receive_until(comm, lambda e: e["type"] == "signed_out", timeout=10)
    close = await comm.receive_output(timeout=5)
    assert close == {"type": "websocket.close", "code": CLOSE_SIGNED_OUT}
    return events


async def still_open(comm) -> None:
    await sync_to_async(broadcast_flush)()
    await comm.send_json_to({"type": "ping"})
    assert await receive_until(comm, lambda e: e["type"] == "pong")
    await comm.disconnect()


def test_signing_out_in_one_tab_closes_the_other_tabs_socket_and_nobody_elses(world):
    tab, cookie = signed_in_client(world.alice)
    other_session = session_cookie(world.alice)  # alice on her phone: a sign-in of its own
    bob = session_cookie(world.bob)

    async def scenario():
        page = await opened(communicator(ALICE_CHAT, cookie=cookie))
        phone = await opened(communicator(ALICE_CHAT, cookie=other_session))
        bobs = await opened(communicator(ALICE_CHAT, cookie=bob))

        response = await sync_to_async(tab.post)("/accounts/logout/")
        assert response.status_code in (200, 302)

        await closed_as_signed_out(page)
        await still_open(phone)  # her other sign-in did not end
        await still_open(bobs)

    async_to_sync(scenario)()


def test_a_password_change_closes_the_sockets_of_every_earlier_sign_in(world):
    cookie = session_cookie(world.alice)
    bob = session_cookie(world.bob)

    async def scenario():
        page = await opened(communicator(ALICE_CHAT, cookie=cookie))
        bobs = await opened(communicator(ALICE_CHAT, cookie=bob))

        def change_password():
            world.alice.set_password("a new one, 2026")
            world.alice.save()

        await sync_to_async(change_password)()

        await closed_as_signed_out(page)
        await still_open(bobs)

    async_to_sync(scenario)()


def test_an_unrelated_save_of_the_user_leaves_their_socket_open(world):
    cookie = session_cookie(world.alice)

    async def scenario():
        page = await opened(communicator(ALICE_CHAT, cookie=cookie))

        def rename():
            world.alice.first_name = "Alicia"
            world.alice.save()  # the hash of the password is unchanged: the session holds

        await sync_to_async(rename)()
        await still_open(page)

    async_to_sync(scenario)()


def test_removal_from_the_tenant_closes_the_members_socket(world):
    cookie = session_cookie(world.alice)

    async def scenario():
        page = await opened(communicator(ALICE_CHAT, cookie=cookie))
        await sync_to_async(lambda: Membership.objects.get(tenant=world.tenant_a, user=world.alice).delete())()
        await closed_as_signed_out(page)

    async_to_sync(scenario)()


def deactivate_in_the_admin(user) -> None:
    """The host unticks "Active" on the person's admin page (a save of every field)."""
    from django.urls import reverse

    from ..admin_forms import served_form
    from ..factories.tenancy import UserFactory

    host = Client()
    host.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    page = reverse("admin:auth_user_change", args=[user.pk])
    joined = timezone.localtime(user.date_joined)  # a date and a time field on the page
    data = {**served_form(host.get(page)), "is_active": "", "date_joined_0": joined.strftime("%Y-%m-%d"),
            "date_joined_1": joined.strftime("%H:%M:%S")}
    response = host.post(page, data)
    assert response.status_code == 302, (response.context["adminform"].form.errors, [f.errors for f in response.context["inline_admin_formsets"]])


@pytest.mark.parametrize("how", ["deactivated in the admin", "deactivated", "deleted"])
@pytest.mark.parametrize("signed_in_with", ["session", "token"])
def test_a_person_deactivated_or_deleted_loses_their_open_sockets(world, how, signed_in_with):
    """Deactivation keeps the membership row: it must close the page's and the terminal's
    socket as removal from the tenant does — and nobody else's."""
    if signed_in_with == "token":
        raw = api_token_create(tenant=world.tenant_a, user=world.alice)[1]
        alices = dict(headers=[(b"authorization", f"Bearer {raw}".encode())])
    else:
        alices = dict(cookie=session_cookie(world.alice))
    bobs_cookie = session_cookie(world.bob)

    def end():
        if how == "deleted":
            world.alice.delete()
        elif how == "deactivated":
            world.alice.is_active = False
            world.alice.save(update_fields=["is_active"])
        else:
            deactivate_in_the_admin(world.alice)

    async def scenario():
        page = await opened(communicator(ALICE_CHAT, **alices))
        bobs = await opened(communicator(ALICE_CHAT, cookie=bobs_cookie))
        await sync_to_async(end)()
        await closed_as_signed_out(page)
        await still_open(bobs)

    async_to_sync(scenario)()


def test_a_revoked_token_closes_the_socket_it_opened(world):
    token, raw = api_token_create(tenant=world.tenant_a, user=world.alice)
    _, other_raw = api_token_create(tenant=world.tenant_a, user=world.alice, name="another client")

    async def scenario():
        revoked = await opened(communicator(ALICE_CHAT, headers=[(b"authorization", f"Bearer {raw}".encode())]))
        other = await opened(communicator(ALICE_CHAT, headers=[(b"authorization", f"Bearer {other_raw}".encode())]))

        def revoke():
            token.revoked_at = timezone.now()
            token.save()

        await sync_to_async(revoke)()
        await closed_as_signed_out(revoked)
        await still_open(other)

    async_to_sync(scenario)()


def test_a_token_revoked_with_the_admins_action_closes_the_socket_it_opened(world):
    """The admin's list action is how tokens are revoked: a socket a leaked token opened
    closes then, not at its holder's next ping (one that never pings would follow the chat
    for as long as it stayed connected)."""
    token, raw = api_token_create(tenant=world.tenant_a, user=world.alice)
    _, other_raw = api_token_create(tenant=world.tenant_a, user=world.alice, name="another client")
    world.alice.is_staff = True
    world.alice.save(update_fields=["is_staff"])
    admin, _ = signed_in_client(world.alice)

    async def scenario():
        leaked = await opened(communicator(ALICE_CHAT, headers=[(b"authorization", f"Bearer {raw}".encode())]))
        other = await opened(communicator(ALICE_CHAT, headers=[(b"authorization", f"Bearer {other_raw}".encode())]))

        response = await sync_to_async(admin.post)(
            "/admin/qorven/apitoken/", {"action": "revoke", "_selected_action": [token.pk]})
        assert response.status_code == 302

        await closed_as_signed_out(leaked)
        await still_open(other)

    async_to_sync(scenario)()


def test_the_sockets_are_told_of_a_revocation_once_it_is_stored(world):
    """A socket checks its sign-in when it is told that it changed. The admin saves in a
    transaction (a page, a removal with its tokens): told before that was committed, the
    socket read the token still live and stayed open, following the chat."""
    import asyncio
    import threading

    from channels.layers import get_channel_layer
    from django.db import connection, transaction

    from channels_app.live_auth import auth_group
    from tenancy.models import ApiToken
    from tenancy.services import api_tokens_revoke

    token, raw = api_token_create(tenant=world.tenant_a, user=world.alice)
    checked = threading.Event()

    def revoke_in_a_transaction():
        try:
            with transaction.atomic():
                api_tokens_revoke(tokens=ApiToken.objects.filter(pk=token.pk))
                broadcast_flush()
                checked.wait(2)  # a socket told already checks meanwhile, as the admin's page goes on
        finally:
            connection.close()  # this thread's own

    async def scenario():
        socket = await opened(communicator(ALICE_CHAT, headers=[(b"authorization", f"Bearer {raw}".encode())]))
        layer = get_channel_layer()
        told = await layer.new_channel()
        await layer.group_add(auth_group(world.alice.pk), told)
        revoking = asyncio.ensure_future(sync_to_async(revoke_in_a_transaction, thread_sensitive=False)())
        event = await asyncio.wait_for(layer.receive(told), 10)
        revoked_when_told = await sync_to_async(
            lambda: ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=False).exists())()
        checked.set()
        await revoking
        await layer.group_discard(auth_group(world.alice.pk), told)
        assert event["type"] == "auth.changed" and revoked_when_told
        await closed_as_signed_out(socket)

    async_to_sync(scenario)()


def test_a_session_that_expires_quietly_is_noticed_on_a_ping(world, monkeypatch):
    monkeypatch.setattr(sign_in, "RECHECK_EVERY", 0.0)
    cookie = session_cookie(world.alice)
    store = import_module(settings.SESSION_ENGINE).SessionStore

    async def scenario():
        page = await opened(communicator(ALICE_CHAT, cookie=cookie))
        await sync_to_async(store(session_key=cookie).delete)()  # gone, with no signal: as expiry is
        await page.send_json_to({"type": "ping"})
        events = await receive_until(page, lambda e: e["type"] == "signed_out")
        assert events[0] == {"type": "pong"}
        assert await page.receive_output(timeout=5) == {"type": "websocket.close", "code": CLOSE_SIGNED_OUT}

    async_to_sync(scenario)()


def test_a_token_that_expires_closes_its_socket_though_its_client_never_pings(world, monkeypatch):
    """Expiry tells no socket, and a client need not ping: the socket checks on its own
    (every RECHECK_EVERY), so a token past its end follows the chat no longer."""
    monkeypatch.setattr(sign_in, "RECHECK_EVERY", 0.5)
    _, raw = api_token_create(tenant=world.tenant_a, user=world.alice,
                              expires_at=timezone.now() + timedelta(seconds=2))

    async def scenario():
        socket = await opened(communicator(ALICE_CHAT, headers=[(b"authorization", f"Bearer {raw}".encode())]))
        events = await receive_until(socket, lambda e: e["type"] == "signed_out", timeout=10)
        assert events == [{"type": "signed_out"}]
        assert await socket.receive_output(timeout=5) == {"type": "websocket.close", "code": CLOSE_SIGNED_OUT}

    async_to_sync(scenario)()


def test_sockets_opened_together_do_not_check_their_sign_in_together(world, monkeypatch):
    """Every client reconnects at once after a restart: were each socket to check its
    sign-in a whole RECHECK_EVERY after it opened, they would all read the database in the
    same moment, every period, for as long as they stay open. Each socket's own checks are
    spread over the second half of the period, so a token that ends quietly closes them
    at different times after each one opened."""
    monkeypatch.setattr(sign_in, "RECHECK_EVERY", 3.0)
    _, raw = api_token_create(tenant=world.tenant_a, user=world.alice)
    bearer = [(b"authorization", f"Bearer {raw}".encode())]

    async def scenario():
        loop = asyncio.get_running_loop()
        sockets = []
        for _ in range(12):
            sockets.append((await opened(communicator(ALICE_CHAT, origin="", headers=bearer)), loop.time()))
        # Ended with no signal, as a token's expiry is: each socket finds out at its own check.
        await sync_to_async(lambda: ApiToken.objects.update(expires_at=timezone.now() - timedelta(seconds=1)))()

        async def open_for(comm, opened_at: float) -> float:
            await receive_until(comm, lambda e: e["type"] == "signed_out", timeout=10)
            return loop.time() - opened_at

        lived = await asyncio.gather(*(open_for(comm, at) for comm, at in sockets))
        assert all(1.0 <= t <= 3.0 + 1.0 for t in lived), lived  # within the period, from their own opening
        assert max(lived) - min(lived) > 0.5, lived

    async_to_sync(scenario)()


def test_a_client_with_a_token_and_no_origin_connects_and_a_cookie_or_a_foreign_page_does_not(world):
    """A browser always sends Origin with a WebSocket and cannot set Authorization: a client
    with a bearer token and no Origin is a program (a script, `qorven chat`), whose token is
    the proof; the origin rule guards cookie sessions and pages of other sites."""
    _, raw = api_token_create(tenant=world.tenant_a, user=world.alice)
    bearer = [(b"authorization", f"Bearer {raw}".encode())]
    cookie = session_cookie(world.alice)

    async def scenario():
        await still_open(await opened(communicator(ALICE_CHAT, origin="", headers=bearer)))
        cookie_only = communicator(ALICE_CHAT, origin="", cookie=cookie)
        assert not (await cookie_only.connect())[0]
        foreign_page = communicator(ALICE_CHAT, origin="https://evil.example", headers=bearer)
        assert not (await foreign_page.connect())[0]
        wrong_token = communicator(ALICE_CHAT, origin="", headers=[(b"authorization", b"Bearer qv_nope")])
        assert not (await wrong_token.connect())[0]

    async_to_sync(scenario)()


# --- the webchat's visitor sockets follow what opened them too ---

WEBCHAT_KEY = "wc_livekey"


@pytest.fixture
def webchat(world):
    from channels_app.services import binding_create

    return binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="webchat",
                          credentials={"key": WEBCHAT_KEY, "secret": "site-secret", "origins": "https://acme.example"})


def visitor_socket(username: str):
    import time

    from channels_app.webchat import webchat_token_sign

    token = webchat_token_sign(secret="site-secret", user_id=username, expires=int(time.time()) + 600)
    return communicator(f"/ws/webchat/{WEBCHAT_KEY}/?visitor={token}")


def _binding_disabled(webchat):
    webchat.enabled = False
    webchat.save()


def _channel_switched_off(webchat):
    from tenancy.models import PluginSetting

    PluginSetting.objects.create(tenant=webchat.tenant, kind="channel", name="webchat", enabled=False)


@pytest.mark.parametrize("change", ["binding disabled", "binding deleted", "channel switched off", "member removed"])
def test_a_webchat_visitors_socket_closes_when_what_let_them_in_ends(world, webchat, change):
    """It kept streaming the person's whole chat after the embed was switched off or they left."""
    ends = {
        "binding disabled": lambda: _binding_disabled(webchat),
        "binding deleted": lambda: webchat.delete(),
        "channel switched off": lambda: _channel_switched_off(webchat),
        "member removed": lambda: Membership.objects.get(tenant=world.tenant_a, user=world.bob).delete(),
    }[change]

    async def scenario():
        bobs = await opened(visitor_socket("bob"))
        alices = await opened(visitor_socket("alice"))
        await sync_to_async(ends)()
        await closed_as_signed_out(bobs)
        if change == "member removed":
            await still_open(alices)
        else:
            await closed_as_signed_out(alices)

    async_to_sync(scenario)()


def test_an_anonymous_visitor_denied_in_the_admin_is_let_go(client, world, webchat):
    import json

    from channels_app.models import Identity

    first = client.post(f"/webchat/{WEBCHAT_KEY}/messages", data=json.dumps({"content": "hi"}),
                        content_type="application/json")
    assert first.status_code == 201, first.content
    token = first.json()["visitor"]

    async def scenario():
        socket = await opened(communicator(f"/ws/webchat/{WEBCHAT_KEY}/?visitor={token}"))

        def deny():
            identity = Identity.objects.get(tenant=world.tenant_a, channel="webchat")
            identity.approval = Identity.Approval.DENIED
            identity.save()

        await sync_to_async(deny)()
        await closed_as_signed_out(socket)

    async_to_sync(scenario)()
