"""Webhooks stored while the broker refuses connections: their processing is queued again
every second until it is back, and the log says once, with the traceback, that it could
not be, not once per webhook; once the broker takes them it says so."""
from __future__ import annotations

import logging

import pytest

from channels_app.models import InboundEvent
from channels_app.webhook_ingest import group_commit
# Imported at collection: its django.setup() sets the logging up again, and did so under
# the test, dropping the handler the log is captured with.
from qorven.asgi import application  # noqa: F401

from ..conftest import EMBEDDED_BROKER, broker_use
from ..fakes.model_server import reply
from ..ports import free_port
from ..processes import wait_for
from .conftest import pair
from .payloads import telegram_update
from .test_webhook_ingest import asgi_post, tg

pytestmark = pytest.mark.django_db(transaction=True)

LOGGER = "channels_app.webhook_ingest"


def test_webhooks_stored_while_the_broker_is_away_log_it_once_and_once_when_it_is_back(
    world, telegram, settings, platform, model_server, drain, caplog
):
    """Before, each batch of webhooks stored while the broker was away logged a traceback
    at ERROR: one a webhook under light traffic, three here."""
    pair(world, "telegram", "42", world.alice)
    model_server.default = reply("Back.")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        broker_use(settings, f"redis://127.0.0.1:{free_port()}/0")  # nothing listens there
        for n in range(3):
            (answer,) = asgi_post(tg(telegram_update(f"while it was away {n}", message_id=720 + n)))
            assert answer.status_code == 200
            assert group_commit.flush(30)  # tried once, and refused
        assert InboundEvent.objects.filter(state="pending").count() == 3
        broker_use(settings, EMBEDDED_BROKER)  # back
        assert wait_for(lambda: not InboundEvent.objects.exclude(state="done").exists(), 120)
        drain()
    lines = [r for r in caplog.records if r.name == LOGGER]
    assert [r.exc_info is not None for r in lines] == [True, False], [r.getMessage() for r in lines]
    assert lines[0].getMessage().startswith("stored webhooks could not be queued for processing")
    assert "working again" in lines[1].getMessage() and "(2 more failures)" in lines[1].getMessage()
    assert platform.sent("sendMessage")
