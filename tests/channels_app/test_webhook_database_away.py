"""Webhooks while the database is away (a restart, a failover): each is answered 503 and
the platform delivers it again, and the log says once, with the traceback, that they
could not be stored, not once per webhook; once one is stored again it says so.
PostgreSQL only: a SQLite file does not go away."""
from __future__ import annotations

import logging

import pytest

from channels_app.models import InboundEvent
# Imported at collection: its django.setup() sets the logging up again, and did so under
# the test, dropping the handler the log is captured with.
from qorven.asgi import application  # noqa: F401
from qorven.runtime.database import DATABASE_DOWN_CODE, DATABASE_DOWN_NOTICE

from ..conftest import database_vendor
from ..database_away import database_away
from ..fakes.model_server import reply
from ..processes import wait_for
from .conftest import pair
from .payloads import telegram_update
from .test_webhook_ingest import asgi_post, tg

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(database_vendor() != "postgresql", reason="a SQLite file does not go away"),
]

LOGGER = "channels_app.webhook_ingest"
AWAY = 3  # webhooks posted while the database is away, one after the other as retries come


@pytest.mark.parametrize("warm", [True, False], ids=["binding-cached", "binding-not-cached"])
def test_webhooks_with_the_database_away_are_answered_503_and_log_one_traceback(
    world, telegram, platform, model_server, drain, caplog, warm
):
    """Before, each webhook posted while the database was away logged a traceback, or
    two and two warnings when its binding was cached (the batch's store, then its own):
    three webhooks, three tracebacks, or four and two warnings."""
    pair(world, "telegram", "42", world.alice)
    model_server.default = reply("ok")
    if warm:  # the binding read lately, as under traffic: the webhooks are stored without reading it
        (answer,) = asgi_post(tg(telegram_update("before", message_id=800)))
        assert answer.status_code == 200
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        with database_away():
            answers = [asgi_post(tg(telegram_update(f"away {n}", message_id=810 + n)))[0] for n in range(AWAY)]
        # Delivered again until it is taken, as a platform does: the server's connections
        # come back in their own time (the pool's reconnection).
        answered: list[int] = []
        assert wait_for(lambda: answered.append(
            asgi_post(tg(telegram_update("back", message_id=830)))[0].status_code) or answered[-1] == 200, 60)
    drain()
    assert [a.status_code for a in answers] == [503] * AWAY
    # As before: the binding could not be read, or (cached) the store was refused.
    assert all(a.json() in ({"error": DATABASE_DOWN_NOTICE, "code": DATABASE_DOWN_CODE},
                            {"error": "not stored; deliver it again"}) for a in answers), [a.json() for a in answers]
    assert answered[-1] == 200 and set(answered[:-1]) <= {503}, answered
    stored = InboundEvent.objects.values_list("external_id", flat=True)
    assert sorted(e[-3:] for e in stored) == (["800"] if warm else []) + ["830"]  # none of those answered 503
    lines = [r for r in caplog.records if r.name == LOGGER]
    assert [r.exc_info is not None for r in lines] == [True, False], [r.getMessage() for r in lines]
    assert "working again" in lines[1].getMessage(), lines[1].getMessage()
