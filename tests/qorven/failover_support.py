"""What the failover tests share: two scripted model servers on ports of their own, a
Qor's main route on the first with the second as its fallback, and the answers stored."""
from __future__ import annotations

import pytest

from qorven.runtime.cooldowns import cooldown_clear
from sessions_app.models import Message
from tenancy.models import ModelFallback, Qor

from ..fakes.model_server import ModelServer


@pytest.fixture
def route_servers(settings):
    settings.QORVEN_ALLOW_PRIVATE_HOSTS = ["127.0.0.1"]  # the fakes listen on loopback
    settings.QORVEN_MODEL_RETRIES = 0
    started = [ModelServer().start(), ModelServer().start()]  # new ports: no cooldown of an earlier test
    yield started
    for server in started:
        for model in ("primary-model", "fallback-model"):
            for key in ("", "key-primary", "key-fallback"):
                cooldown_clear(base_url=server.base_url, model=model, key=key)
        server.stop()


def primary_and_fallback(world, primary, fallback) -> None:
    """The Qor's main route on `primary` and its first fallback on `fallback`, each with a
    key of its own."""
    Qor.objects.filter(pk=world.qor_a.pk).update(main_base_url=primary.base_url, main_model="primary-model",
                                                 main_api_key="key-primary")
    ModelFallback.objects.create(qor=world.qor_a, role="main", position=1, base_url=fallback.base_url,
                                 model="fallback-model", api_key="key-fallback")


def assistant_answers() -> list[tuple[str, dict]]:
    """(content, metadata) of every assistant message, in order."""
    return list(Message.objects.filter(role="assistant").order_by("seq").values_list("content", "metadata"))
