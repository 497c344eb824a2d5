"""A binding whose webhook secret was changed (say, because it leaked) stops being whose a
webhook signed with the old secret is: such webhooks are junk to the bound on those
waiting to be stored, not the binding's (channels_app.webhook_bound)."""
from __future__ import annotations

import pytest

from channels_app import webhook_bound
from channels_app.adapters.base import secret_digest
from channels_app.models import InboundEvent
from channels_app.webhook_ingest import group_commit

from .held_inserts import inserts_held
from .payloads import telegram_update
from .test_webhook_fair_share import answered_or_waiting, flooding, globex_bot, settled
from .test_webhook_ingest import asgi_post, posting, tg, waiting_reaches

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("where", ["here", "elsewhere"])
def test_webhooks_signed_with_a_replaced_secret_take_no_share_of_the_bindings_own(world, telegram, platform,
                                                                                 monkeypatch, settings, where):
    """Acme's bot's secret leaked and its owner set a new one in the admin, of this server
    process or of another (seen here once what this one read is past its time, and one
    webhook with the old secret has been refused). Whoever has the old one floods the
    webhook with it: the storing thread refuses each (403), but the screening counted them
    as acme's, from what the server had read of the binding before the change, so while
    they waited acme's own webhooks, with the new secret, were answered 503 past acme's
    share, delayed for as long as the flood lasted."""
    if where == "elsewhere":
        settings.QORVEN_ROUTE_CACHE_SECONDS = 0.001  # what is read is past its time at once
    globex_bot(world)
    if where == "here":
        telegram.credentials = {**telegram.credentials, "secret": "tg-secret-new"}
        telegram.lookup_key = secret_digest("tg-secret-new")
        telegram.save()
    else:
        type(telegram).objects.filter(pk=telegram.pk).update(
            credentials={**telegram.credentials, "secret": "tg-secret-new"}, lookup_key=secret_digest("tg-secret-new"))
        assert [r.status_code for r in asgi_post(tg(telegram_update("leaked", message_id=99)))] == [403]
    assert [r.status_code for r in asgi_post(tg(telegram_update("acme, new secret", message_id=5),
                                                secret="tg-secret-new"))] == [200]
    monkeypatch.setattr(webhook_bound, "MAX_WAITING", 10)
    old = [tg(telegram_update("leaked", message_id=100 + i)) for i in range(20)]  # the old "tg-secret-a"
    with inserts_held():
        globex, globex_answers = posting(tg(telegram_update("globex, while it is slow", user_id=77, message_id=6),
                                            secret="tg-secret-b"))
        waiting_reaches(1)  # the storing thread waits at its INSERT
        flood, flood_answers = flooding(*old)
        settled(flood_answers, len(old), 1)
        assert 503 in {r.status_code for r in flood_answers}
        waiting = group_commit.waiting()[0]
        acme, acme_answers = posting(tg(telegram_update("acme, in the flood", message_id=7), secret="tg-secret-new"))
        answered_or_waiting(acme_answers, waiting + 1)
        assert [r.status_code for r in acme_answers] == []  # taken, not answered before it is stored
    for thread in (globex, flood, acme):
        thread.join(30)
    assert [r.status_code for r in globex_answers + acme_answers] == [200, 200]
    assert {r.status_code for r in flood_answers} <= {403, 503}
    assert sorted(InboundEvent.objects.values_list("external_id", flat=True)) == [
        "42:1", "42:5", "42:7", "77:2", "77:6"]
