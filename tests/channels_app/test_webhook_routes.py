"""A webhook resolves its binding and its channel switch from the process's cache, so a
steady stream of webhooks is one INSERT each; a change is seen at once in this process and
within QORVEN_ROUTE_CACHE_SECONDS in any other, and nothing a stale cache let in is answered."""
from __future__ import annotations

import time

import pytest

from channels_app.models import ChannelBinding, InboundEvent
from sessions_app.models import Message
from tenancy.models import PluginSetting

from ..fakes.model_server import reply
from .conftest import pair
from .payloads import post_telegram, telegram_update

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_webhook_after_the_first_is_one_insert(client, world, telegram, django_assert_num_queries):
    assert post_telegram(client, telegram_update("first", message_id=1)).status_code == 200
    with django_assert_num_queries(1) as captured:
        assert post_telegram(client, telegram_update("second", message_id=2)).status_code == 200
    assert captured.captured_queries[0]["sql"].upper().startswith("INSERT")
    assert InboundEvent.objects.count() == 2


def test_a_binding_disabled_in_this_process_refuses_the_next_webhook(client, world, telegram):
    assert post_telegram(client, telegram_update("before", message_id=1)).status_code == 200
    telegram.enabled = False
    telegram.save(update_fields=["enabled"])

    assert post_telegram(client, telegram_update("after", message_id=2)).status_code == 403
    assert InboundEvent.objects.count() == 1


def test_a_channel_switched_off_in_this_process_refuses_the_next_webhook(client, world, telegram):
    assert post_telegram(client, telegram_update("before", message_id=1)).status_code == 200
    PluginSetting.objects.create(tenant=world.tenant_a, kind="channel", name="telegram", enabled=False)

    assert post_telegram(client, telegram_update("after", message_id=2)).status_code == 404
    assert InboundEvent.objects.count() == 1


def test_a_binding_disabled_elsewhere_is_never_answered_and_refused_once_the_cache_ages(
    client, world, telegram, platform, model_server, drain, settings
):
    settings.QORVEN_ROUTE_CACHE_SECONDS = 1.0
    pair(world, "telegram", "42", world.alice)
    model_server.add(reply("hello there"))
    assert post_telegram(client, telegram_update("before", message_id=1)).status_code == 200
    drain()
    # The same delivery again (stored once): the binding is cached from now on.
    cached_at = time.monotonic()
    assert post_telegram(client, telegram_update("before", message_id=1)).status_code == 200
    # Another process switches it off: no signal reaches this one.
    ChannelBinding.objects.filter(pk=telegram.pk).update(enabled=False)

    assert post_telegram(client, telegram_update("after", message_id=2)).status_code == 200  # cached
    drain()
    assert InboundEvent.objects.get(external_id__endswith=":2").result == "switched-off"
    assert not Message.objects.filter(content__contains="after").exists()
    assert len(platform.sent("sendMessage")) == 1  # the reply to "before" only

    time.sleep(max(0.0, cached_at + 1.1 - time.monotonic()))
    assert post_telegram(client, telegram_update("later", message_id=3)).status_code == 403


def test_a_channel_switched_off_elsewhere_is_never_answered(client, world, telegram, platform, model_server, drain):
    pair(world, "telegram", "42", world.alice)
    model_server.add(reply("hello there"))
    assert post_telegram(client, telegram_update("before", message_id=1)).status_code == 200
    drain()
    PluginSetting.objects.bulk_create(  # as another process would: no signal here
        [PluginSetting(tenant=world.tenant_a, kind="channel", name="telegram", enabled=False)]
    )

    assert post_telegram(client, telegram_update("after", message_id=2)).status_code == 200
    drain()
    assert InboundEvent.objects.get(external_id__endswith=":2").result == "switched-off"
    assert not Message.objects.filter(content__contains="after").exists()
    assert len(platform.sent("sendMessage")) == 1


def test_a_new_binding_made_elsewhere_is_found_at_once(client, world):
    from django.db.models.signals import post_save

    from channels_app.adapters.base import webhook_bindings
    from channels_app.services import binding_create

    assert post_telegram(client, telegram_update("nobody", message_id=1)).status_code == 403
    # Made by another process (`qorven bind`): this one hears nothing of it.
    uid = "channels_app.bindings.ChannelBinding"
    post_save.disconnect(sender=ChannelBinding, dispatch_uid=uid)
    try:
        binding_create(tenant=world.tenant_a, qor=world.qor_a, kind="telegram",
                       credentials={"token": "111:AAA", "secret": "tg-secret-a", "username": "aria_bot"})
    finally:
        post_save.connect(webhook_bindings.clear, sender=ChannelBinding, dispatch_uid=uid)
    assert post_telegram(client, telegram_update("somebody", message_id=2)).status_code == 200
