"""On PostgreSQL + Redis a reply goes out while Redis is away: the gates that keep a bot
to one send at a time (channels_app.send_gate) are the database's, not Redis keys."""
from __future__ import annotations

import pytest
from django.core.cache import cache

from channels_app.models import OutboundDelivery
from channels_app.tasks import deliveries_send

from ..ports import free_port
from ..processes import needs_postgres_and_redis
from .conftest import pair, replies_waiting

pytestmark = [pytest.mark.django_db(transaction=True), needs_postgres_and_redis]


@pytest.fixture
def redis_away(settings):
    """Django's cache pointed at a Redis port nobody listens on: Redis is down."""
    settings.CACHES = {"default": {**settings.CACHES["default"], "LOCATION": f"redis://127.0.0.1:{free_port()}/0"}}
    with pytest.raises(Exception, match="(?i)connect"):
        cache.get("anything")


def test_a_reply_finished_while_redis_is_away_is_sent_at_once(world, telegram, platform, drain, redis_away):
    """A reply a turn finished while Redis was down waited for Redis to come back (the
    send gate's key could not be set) and then for the sweeper."""
    pair(world, "telegram", "42", world.alice)
    first, second = replies_waiting(world, telegram, ["Here it is.", "And one more thing."])
    # As the task that wrote them sends them (channels_app.tasks.sends_at_the_end).
    deliveries_send([(world.tenant_a.pk, first.pk), (world.tenant_a.pk, second.pk)], worker="w1")
    assert [s.json["text"] for s in platform.sent("sendMessage")] == ["Here it is.", "And one more thing."]
    assert set(OutboundDelivery.objects.values_list("state", flat=True)) == {"sent"}
