"""`/metrics`: Prometheus text with what a turn did and what the database holds, served
only to the token's bearer (or, without a token, to local clients)."""
from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ..fakes.model_server import reply
from .conftest import pair
from .payloads import post_telegram, telegram_update

pytestmark = pytest.mark.django_db(transaction=True)


def samples(text: str) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def scrape(client, **headers) -> dict[tuple[str, tuple], float]:
    response = client.get("/metrics", **headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain")
    return samples(response.content.decode())


def test_metrics_count_a_turn_its_model_call_and_the_stored_rows(client, world, telegram, platform, model_server,
                                                                  drain, settings):
    settings.QORVEN_METRICS_TOKEN = "metrics-secret"
    before = scrape(client, HTTP_AUTHORIZATION="Bearer metrics-secret")
    pair(world, "telegram", "42", world.alice)
    model_server.add(reply("Noted."))
    post_telegram(client, telegram_update("buy milk"))
    drain()
    after = scrape(client, HTTP_AUTHORIZATION="Bearer metrics-secret")

    def grew(name, **labels):
        key = (name, tuple(sorted(labels.items())))
        return after.get(key, 0) - before.get(key, 0)

    assert grew("qorven_turns_total", outcome="answered") == 1
    assert grew("qorven_turn_seconds_count") == 1
    assert grew("qorven_model_calls_total", role="main", outcome="ok") == 1
    assert grew("qorven_model_call_seconds_count", role="main") == 1
    assert after[("qorven_inbound_events", (("channel", "telegram"), ("state", "done")))] == 1
    assert after[("qorven_deliveries", (("channel", "telegram"), ("state", "sent")))] == 1
    assert after[("qorven_messages_unanswered", (("state", "pending"),))] == 0
    assert after[("qorven_usage_tokens_total", (("kind", "prompt"), ("role", "main")))] > 0
    assert ("qorven_task_queue_depth", ()) in after and ("qorven_live_sockets", ()) in after


def test_metrics_refuse_a_missing_or_wrong_token(client, settings):
    settings.QORVEN_METRICS_TOKEN = "metrics-secret"
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer nope").status_code == 401


def test_without_a_token_only_local_clients_are_served(client, settings, db):
    settings.QORVEN_METRICS_TOKEN = ""
    assert client.get("/metrics").status_code == 200  # the test client is 127.0.0.1
    assert client.get("/metrics", REMOTE_ADDR="203.0.113.9").status_code == 403


@pytest.mark.parametrize("relayed", [{"HTTP_X_FORWARDED_PROTO": "https"}, {"HTTP_X_FORWARDED_FOR": "203.0.113.9"},
                                     {"HTTP_FORWARDED": "for=203.0.113.9;proto=https"}])
def test_without_a_token_a_request_a_proxy_relayed_is_not_a_local_client(client, settings, db, relayed):
    """A proxy on the same machine connects from loopback: without this, the README's
    production settings served /metrics to anyone at https://<host>/metrics."""
    settings.QORVEN_METRICS_TOKEN = ""
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    refused = client.get("/metrics", REMOTE_ADDR="127.0.0.1", **relayed)
    assert refused.status_code == 403 and "QORVEN_METRICS_TOKEN" in refused.json()["error"]
    settings.QORVEN_METRICS_TOKEN = "metrics-secret"
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer metrics-secret", **relayed).status_code == 200


def test_a_workspaces_owner_is_not_served_the_host_wide_figures(client, world, tenant_admin, settings):
    """The figures count every workspace's messages, deliveries and tokens: they are the
    host's, read with its token (or on its loopback), never with a workspace's own sign-in
    or API token."""
    from tenancy.services import api_token_create

    _, raw = api_token_create(tenant=world.tenant_a, user=world.alice)
    settings.QORVEN_METRICS_TOKEN = "metrics-secret"
    assert tenant_admin.get("/metrics", REMOTE_ADDR="203.0.113.9").status_code == 401
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {raw}", REMOTE_ADDR="203.0.113.9").status_code == 401
    settings.QORVEN_METRICS_TOKEN = ""
    assert tenant_admin.get("/metrics", REMOTE_ADDR="203.0.113.9").status_code == 403
