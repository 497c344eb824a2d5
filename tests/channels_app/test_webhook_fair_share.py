"""The bound on webhooks waiting to be stored is shared: a flood of junk posted by anyone,
or one workspace's own flood, is answered 503 past its share while another workspace's
well-signed webhooks are still taken (channels_app.webhook_ingest)."""
from __future__ import annotations

import asyncio
import json
import threading
import time

import httpx
import pytest

from channels_app import webhook_bound
from channels_app.models import InboundEvent
from channels_app.services import binding_create
from channels_app.webhook_ingest import group_commit

from .held_inserts import inserts_held
from .payloads import email_body, telegram_update
from .test_webhook_ingest import asgi_post, posting, tg, waiting_reaches

pytestmark = pytest.mark.django_db(transaction=True)


def flooding(*requests: tuple[str, bytes, dict[str, str]]) -> tuple[threading.Thread, list[httpx.Response]]:
    """POST the requests all at once on a thread of their own: (the thread, each answer as
    it comes)."""
    from qorven.asgi import application

    answers: list[httpx.Response] = []

    async def run() -> None:
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
            async def one(path: str, body: bytes, headers: dict[str, str]) -> None:
                answers.append(await client.post(path, content=body, headers=headers))

            await asyncio.gather(*(one(*request) for request in requests))

    thread = threading.Thread(target=lambda: asyncio.run(run()))
    thread.start()
    return thread, answers


def settled(flood: list[httpx.Response], sent: int, held_before: int) -> None:
    """Wait until each of the `sent` webhooks of a flood is either answered or waiting."""
    deadline = time.monotonic() + 10
    while len(flood) + group_commit.waiting()[0] - held_before < sent:
        assert time.monotonic() < deadline, f"{len(flood)} answered, {group_commit.waiting()} waiting"
        time.sleep(0.01)


def answered_or_waiting(answers: list[httpx.Response], count: int) -> None:
    deadline = time.monotonic() + 10
    while not answers and group_commit.waiting()[0] < count:
        assert time.monotonic() < deadline, f"{group_commit.waiting()} waiting, not {count}"
        time.sleep(0.01)


def globex_bot(world) -> None:
    """Tenant B's Telegram bot beside tenant A's, both read by this server (each has had a
    webhook stored), as a server taking their messages has them."""
    binding_create(tenant=world.tenant_b, qor=world.qor_b, kind="telegram",
                           credentials={"token": "222:BBB", "secret": "tg-secret-b", "username": "b_bot"})
    warm = asgi_post(tg(telegram_update("acme, earlier", message_id=1)),
                     tg(telegram_update("globex, earlier", user_id=77, message_id=2), secret="tg-secret-b"))
    assert [r.status_code for r in warm] == [200, 200]


def stored_ids() -> list[str]:
    return sorted(x.rpartition(":")[2] for x in InboundEvent.objects.values_list("external_id", flat=True))


@pytest.mark.parametrize("cache_seconds", [5.0, 0.001], ids=["bindings-cached", "cached-bindings-past-their-time"])
def test_a_flood_of_unsigned_webhooks_leaves_room_for_another_workspaces_signed_one(world, telegram, monkeypatch,
                                                                                   settings, platform, cache_seconds):
    """Anyone may post to the webhook URL: junk with forged secrets takes at most the
    share of the unverified, and a request with no secret at all no place. A binding read
    longer ago than QORVEN_ROUTE_CACHE_SECONDS is still told by its signature (the storing
    thread, held up, has not read it again)."""
    settings.QORVEN_ROUTE_CACHE_SECONDS = cache_seconds
    globex_bot(world)
    monkeypatch.setattr(webhook_bound, "MAX_WAITING", 10)
    junk = [tg(telegram_update("junk", message_id=100 + i), secret=f"forged-{i}") for i in range(20)]
    unsigned = [(path, body, {k: v for k, v in headers.items() if k != "x-telegram-bot-api-secret-token"})
                for path, body, headers in (tg(telegram_update("unsigned", message_id=200 + i)) for i in range(10))]
    with inserts_held():
        acme, acme_answers = posting(tg(telegram_update("acme, while it is slow", message_id=3)))
        waiting_reaches(1)  # the storing thread waits at its INSERT
        flood, flood_answers = flooding(*junk, *unsigned)
        settled(flood_answers, len(junk) + len(unsigned), 1)
        waiting = group_commit.waiting()[0]
        globex, globex_answers = posting(tg(telegram_update("globex, while it is slow", user_id=77, message_id=4),
                                            secret="tg-secret-b"))
        answered_or_waiting(globex_answers, waiting + 1)
        assert [r.status_code for r in globex_answers] == []  # taken, not answered before it is stored
        # Those with no secret at all are refused at once, taking no place; the forged ones
        # past the unverified share are answered 503, with Retry-After.
        assert sorted({r.status_code for r in flood_answers}) == [401, 503]
        assert [r.status_code for r in flood_answers].count(401) == len(unsigned)
        assert all(r.headers["retry-after"] for r in flood_answers if r.status_code == 503)
    for thread in (acme, flood, globex):
        thread.join(30)
    assert [r.status_code for r in acme_answers + globex_answers] == [200, 200]
    assert {r.status_code for r in flood_answers} <= {401, 403, 503}
    assert stored_ids() == ["1", "2", "3", "4"]  # nothing of the flood


def test_one_workspaces_flood_leaves_room_for_another_workspaces_webhooks(world, telegram, platform, monkeypatch):
    """A big group's burst on one workspace's bot is answered 503 past its share (the
    platform delivers those again), and everything it had taken is stored."""
    globex_bot(world)
    monkeypatch.setattr(webhook_bound, "MAX_WAITING", 10)
    with inserts_held():
        acme, acme_answers = flooding(*(tg(telegram_update(f"acme {i}", message_id=100 + i)) for i in range(20)))
        settled(acme_answers, 20, 0)
        refused = len(acme_answers)
        assert refused and {r.status_code for r in acme_answers} == {503}
        waiting = group_commit.waiting()[0]
        globex, globex_answers = posting(tg(telegram_update("globex, in acme's flood", user_id=77, message_id=5),
                                            secret="tg-secret-b"))
        answered_or_waiting(globex_answers, waiting + 1)
        assert [r.status_code for r in globex_answers] == []
    for thread in (acme, globex):
        thread.join(30)
    assert [r.status_code for r in globex_answers] == [200]
    assert sorted(r.status_code for r in acme_answers) == [200] * (20 - refused) + [503] * refused
    assert len(stored_ids()) == 2 + 20 - refused + 1


def test_a_forged_signature_for_a_binding_the_server_has_is_refused_at_once(world, telegram, platform):
    """Refused on the event loop with what the binding cache keeps, as the storing thread
    would refuse it, without waiting behind the webhooks there; nothing of it stored."""
    from channels_app.adapters.base import hmac_hex

    binding_create(tenant=world.tenant_b, qor=world.qor_b, kind="slack", credentials={
        "app_id": "A0APP", "bot_token": "xoxb-1", "signing_secret": "slack-signing", "bot_user_id": "UBOT"})

    def slack(signing_secret: str) -> tuple[str, bytes, dict[str, str]]:
        body = json.dumps({"type": "event_callback", "api_app_id": "A0APP", "event_id": "Ev1",
                           "event": {"type": "reaction_added"}}).encode()
        stamp = str(int(time.time()))
        return ("/v1/webhooks/slack", body, {
            "content-type": "application/json", "x-slack-request-timestamp": stamp,
            "x-slack-signature": "v0=" + hmac_hex(signing_secret, b"v0:" + stamp.encode() + b":" + body)})

    assert [r.status_code for r in asgi_post(slack("slack-signing"))] == [200]  # the binding read once
    with inserts_held():
        acme, acme_answers = posting(tg(telegram_update("acme, while it is slow", message_id=3)))
        waiting_reaches(1)
        forged, forged_answers = posting(slack("guessed"))
        forged.join(10)
        assert not forged.is_alive(), "the forged webhook waited behind the one being stored"
        assert [r.status_code for r in forged_answers] == [401]
        assert group_commit.waiting()[0] == 1
    acme.join(30)
    assert [r.status_code for r in acme_answers] == [200]
    assert stored_ids() == ["3"]


def mail(message_id: str, *, to: str = "aria@acme.example", secret: str = "mail-secret") -> tuple[str, bytes, dict[str, str]]:
    body = {**email_body("Trip plans", f"<{message_id}@example.com>"), "to": to}
    return ("/v1/webhooks/email", json.dumps(body).encode(),
            {"content-type": "application/json", "x-qorven-email-secret": secret})


def test_a_flood_of_forged_email_leaves_room_for_a_bound_addresses_mail(world, telegram, email, platform, monkeypatch):
    """An email webhook names its binding by the addresses it was sent to: one this process
    has read is screened from its cache as the other platforms are, so junk posted to the
    email URL takes the unverified share only, and the bound address's mail is still taken
    (it was unverified too, and answered 503 with the junk)."""
    assert [r.status_code for r in asgi_post(mail("earlier"))] == [200]  # this process has read the binding
    monkeypatch.setattr(webhook_bound, "MAX_WAITING", 10)
    junk = [mail(f"junk-{i}", to=f"someone-{i}@acme.example", secret=f"guess-{i}") for i in range(20)]
    unsigned = [(path, body, {k: v for k, v in headers.items() if k != "x-qorven-email-secret"})
                for path, body, headers in (mail(f"unsigned-{i}") for i in range(5))]
    with inserts_held():
        acme, acme_answers = posting(tg(telegram_update("acme, while it is slow", message_id=3)))
        waiting_reaches(1)
        flood, flood_answers = flooding(*junk, *unsigned)
        settled(flood_answers, len(junk) + len(unsigned), 1)
        assert 503 in {r.status_code for r in flood_answers}
        waiting = group_commit.waiting()[0]
        bound, bound_answers = posting(mail("while it is slow"))
        answered_or_waiting(bound_answers, waiting + 1)
        assert [r.status_code for r in bound_answers] == []  # taken, not answered before it is stored
        # Without a secret, refused at once, taking no place.
        assert [r.status_code for r in flood_answers].count(401) == len(unsigned)
    for thread in (acme, flood, bound):
        thread.join(30)
    assert [r.status_code for r in acme_answers + bound_answers] == [200, 200]
    assert {r.status_code for r in flood_answers} <= {401, 503}
    assert sorted(InboundEvent.objects.filter(binding=email).values_list("external_id", flat=True)) == [
        "<earlier@example.com>", "<while it is slow@example.com>"]


def test_an_email_to_two_addresses_bound_with_one_secret_is_stored_under_the_first_it_names(world, telegram, email,
                                                                                              platform):
    """Two workspaces' addresses bound with one secret (one mail service posting for both),
    one of them read lately here: the email naming both is stored under the first it names,
    as the storing thread reads them, not under the one the screening's cache happened to
    keep (it was, when the first was not kept)."""
    globex = binding_create(tenant=world.tenant_b, qor=world.qor_b, kind="email",
                            credentials={"address": "aria@globex.example", "secret": "mail-secret"})
    assert [r.status_code for r in asgi_post(mail("earlier"))] == [200]  # this process keeps acme's, not globex's
    both = mail("to both", to="Aria <aria@globex.example>, aria@acme.example")
    assert [r.status_code for r in asgi_post(both)] == [200]
    event = InboundEvent.objects.get(external_id="<to both@example.com>")
    assert (event.binding_id, event.tenant_id) == (globex.pk, world.tenant_b.pk)


def test_a_forged_email_for_a_bound_address_is_answered_as_one_for_an_unbound_address(world, telegram, email, platform):
    """The email webhook gives one answer for an address nobody bound and a wrong secret, so
    that a prober cannot learn which addresses this server takes mail for: the screening,
    which keeps the bound one, does not refuse it at once (nor sooner than the other)."""
    assert [r.status_code for r in asgi_post(mail("earlier"))] == [200]  # this process has read the binding
    with inserts_held():
        acme, acme_answers = posting(tg(telegram_update("acme, while it is slow", message_id=3)))
        waiting_reaches(1)
        bound, bound_answers = posting(mail("forged", secret="guess"))
        unbound, unbound_answers = posting(mail("forged too", to="nobody@acme.example", secret="guess"))
        waiting_reaches(3)  # both wait behind the one being stored
        assert bound_answers == unbound_answers == []
    for thread in (acme, bound, unbound):
        thread.join(30)
    assert [(r.status_code, r.json()) for r in bound_answers] == [(r.status_code, r.json()) for r in unbound_answers]
    assert [r.status_code for r in bound_answers] == [401]


@pytest.mark.parametrize("cache_seconds", [5.0, 0.0], ids=["bindings-cached", "no-caching"])
def test_a_server_just_started_tells_a_bindings_first_webhooks_from_junk(world, telegram, platform, monkeypatch,
                                                                         settings, cache_seconds):
    """A server process reads the enabled bindings into its cache as it starts: the first
    webhooks of a binding, before any of them is stored, take that binding's share, not
    the unverified one's with a flood of junk (they were answered 503 until the junk
    stopped). With QORVEN_ROUTE_CACHE_SECONDS=0 what was read is kept only to tell whose
    a webhook is: the storing thread verifies it against the binding read afresh."""
    import io

    from qorven.runtime.row_cache import row_caches_clear
    from qorven.runtime.startup import Startup, startup_run

    settings.QORVEN_ROUTE_CACHE_SECONDS = cache_seconds
    binding_create(tenant=world.tenant_b, qor=world.qor_b, kind="telegram",
                   credentials={"token": "222:BBB", "secret": "tg-secret-b", "username": "b_bot"})
    row_caches_clear()  # a process just started has read nothing
    startup_run(Startup("serve", io.StringIO(), io.StringIO(), embedded=False), after_worker=False)
    monkeypatch.setattr(webhook_bound, "MAX_WAITING", 10)
    junk = [tg(telegram_update("junk", message_id=100 + i), secret=f"forged-{i}") for i in range(20)]
    with inserts_held():
        acme, acme_answers = posting(tg(telegram_update("acme, while it is slow", message_id=3)))
        waiting_reaches(1)
        flood, flood_answers = flooding(*junk)
        settled(flood_answers, len(junk), 1)
        assert {r.status_code for r in flood_answers} == {503}
        waiting = group_commit.waiting()[0]
        globex, globex_answers = posting(tg(telegram_update("globex, first since the start", user_id=77,
                                                            message_id=4), secret="tg-secret-b"))
        forged, forged_answers = posting(tg(telegram_update("globex?", user_id=77, message_id=5), secret="tg-secret-c"))
        answered_or_waiting(globex_answers, waiting + 1)
        assert [r.status_code for r in globex_answers] == []  # taken, not answered before it is stored
        forged.join(30)
        assert [r.status_code for r in forged_answers] == [503]  # unverified: its share is full
    for thread in (acme, flood, globex):
        thread.join(30)
    assert [r.status_code for r in acme_answers + globex_answers] == [200, 200]
    assert stored_ids() == ["3", "4"]


def test_a_server_just_started_refuses_a_forged_slack_webhook_at_once(world, telegram, platform):
    """Slack's bindings are read as the server starts too, under the keys its webhooks
    look them up by (the app's id): a forged signature is refused on the event loop."""
    import io

    from channels_app.adapters.base import hmac_hex
    from qorven.runtime.row_cache import row_caches_clear
    from qorven.runtime.startup import Startup, startup_run

    binding_create(tenant=world.tenant_b, qor=world.qor_b, kind="slack", credentials={
        "app_id": "A0APP", "bot_token": "xoxb-1", "signing_secret": "slack-signing", "bot_user_id": "UBOT"})
    row_caches_clear()
    startup_run(Startup("serve", io.StringIO(), io.StringIO(), embedded=False), after_worker=False)
    body = json.dumps({"type": "event_callback", "api_app_id": "A0APP", "event_id": "Ev1",
                       "event": {"type": "reaction_added"}}).encode()
    stamp = str(int(time.time()))
    forged_request = ("/v1/webhooks/slack", body, {
        "content-type": "application/json", "x-slack-request-timestamp": stamp,
        "x-slack-signature": "v0=" + hmac_hex("guessed", b"v0:" + stamp.encode() + b":" + body)})
    with inserts_held():
        acme, acme_answers = posting(tg(telegram_update("acme, while it is slow", message_id=3)))
        waiting_reaches(1)
        forged, forged_answers = posting(forged_request)
        forged.join(10)
        assert not forged.is_alive(), "the forged webhook waited behind the one being stored"
        assert [r.status_code for r in forged_answers] == [401]
    acme.join(30)
    assert [r.status_code for r in acme_answers] == [200]


def test_a_workspace_flooding_through_several_bots_holds_one_share_not_one_a_bot(world, telegram, platform,
                                                                                  monkeypatch):
    """The share is a workspace's: acme's flood through three bots of its own took three
    shares, one a bot, and with the whole bound full between them globex's webhook was
    answered 503. A workspace can bind as many bots and addresses as it likes."""
    globex_bot(world)
    for n in (2, 3):
        binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="telegram",
                       credentials={"token": f"11{n}:AAA", "secret": f"tg-secret-a{n}", "username": f"aria{n}_bot"})
    assert [r.status_code for r in asgi_post(*(tg(telegram_update(f"bot {n}", message_id=10 + n), secret=f"tg-secret-a{n}")
                                               for n in (2, 3)))] == [200, 200]  # this process has read them
    monkeypatch.setattr(webhook_bound, "MAX_WAITING", 10)
    bots = ["tg-secret-a", "tg-secret-a2", "tg-secret-a3"]
    with inserts_held():
        acme, acme_answers = flooding(*(tg(telegram_update(f"acme {i}", message_id=100 + i), secret=bots[i // 10])
                                        for i in range(30)))
        settled(acme_answers, 30, 0)
        assert 503 in {r.status_code for r in acme_answers}
        waiting = group_commit.waiting()[0]
        globex, globex_answers = posting(tg(telegram_update("globex, in acme's flood", user_id=77, message_id=5),
                                            secret="tg-secret-b"))
        answered_or_waiting(globex_answers, waiting + 1)
        assert [r.status_code for r in globex_answers] == []  # taken, not answered before it is stored
    for thread in (acme, globex):
        thread.join(30)
    assert [r.status_code for r in globex_answers] == [200]
