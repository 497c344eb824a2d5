"""Health and readiness for load balancers: up, and able to work now."""
from __future__ import annotations

import copy

import pytest
from django.db import connection

def test_healthz_answers_without_touching_anything(client):
    response = client.get("/healthz")  # no database marker: any query would fail the test
    assert (response.status_code, response.json()) == (200, {"status": "ok"})


@pytest.mark.django_db
def test_the_probes_answer_a_head_request_as_load_balancers_send_it(client, settings):
    """Some load balancers probe with HEAD: a 405 marked the process down."""
    settings.REDIS_URL = ""
    for path in ("/healthz", "/readyz"):
        response = client.head(path)
        assert (response.status_code, response.content) == (200, b""), path
    assert client.post("/healthz").status_code == 405


@pytest.mark.django_db
def test_probes_answer_whatever_address_they_come_by_and_over_plain_http(client, settings, caplog):
    """Load balancers and orchestrators probe a process by its IP, over plain HTTP behind
    the TLS they terminate: not a host this server serves pages as (a 400 and an error
    logged per probe), nor a redirect to https."""
    settings.SECURE_SSL_REDIRECT = True
    settings.REDIS_URL = ""
    for path in ("/healthz", "/readyz"):
        response = client.get(path, HTTP_HOST="10.0.0.5:8765")
        assert (response.status_code, response.json()["status"]) == (200, "ok")
    assert not [r for r in caplog.records if r.levelname == "ERROR"]
    assert client.get("/accounts/login/", HTTP_HOST="10.0.0.5:8765").status_code == 400  # pages still are not


@pytest.mark.django_db
def test_metrics_are_scraped_by_address_and_over_plain_http_by_the_scrape_rule_alone(client, settings):
    """On the README's production settings (a public host, https) a scraper reaching the
    process by its address got a 400 (not an allowed host) or a redirect to https; who
    may read is the token's (or loopback's) to say."""
    settings.SECURE_SSL_REDIRECT = True
    settings.ALLOWED_HOSTS = ["qorven.example.com"]
    settings.QORVEN_METRICS_TOKEN = "scrape-me"
    scraped = client.get("/metrics", HTTP_HOST="10.0.0.5:8765", HTTP_AUTHORIZATION="Bearer scrape-me")
    assert scraped.status_code == 200 and b"qorven_" in scraped.content
    refused = client.get("/metrics", HTTP_HOST="10.0.0.5:8765")
    assert refused.status_code == 401 and refused.json()["error"]


@pytest.mark.django_db(transaction=True)
def test_readyz_is_ready_with_the_database_and_unavailable_without_it(client, settings):
    settings.REDIS_URL = ""  # this test is about the database
    ready = client.get("/readyz")
    assert (ready.status_code, ready.json()) == (200, {"status": "ok", "checks": {"database": "ok"}})

    saved = copy.deepcopy(connection.settings_dict)
    pooled = "pool" in connection.settings_dict.get("OPTIONS", {})
    connection.close()
    if connection.vendor == "sqlite":
        connection.settings_dict["NAME"] = "/nonexistent-dir/db.sqlite3"
    else:
        connection.settings_dict.update(HOST="127.0.0.1", PORT="9")  # nothing listens there
        if pooled:  # a new pool for the new address, which gives up soon
            connection.close_pool()
            connection.settings_dict["OPTIONS"]["pool"]["timeout"] = 1
    try:
        down = client.get("/readyz")
    finally:
        connection.close()
        if pooled:
            connection.close_pool()
        connection.settings_dict.clear()
        connection.settings_dict.update(saved)
    assert (down.status_code, down.json()) == (503, {"status": "unavailable", "checks": {"database": "unavailable"}})
    assert "nonexistent" not in down.content.decode() and "9" not in down.json()["checks"]["database"]


def test_readyz_checks_redis_on_scale_out(client, settings, db):
    settings.REDIS_URL = "redis://127.0.0.1:9/0"  # nothing listens there
    import qorven.health

    qorven.health._redis = None
    try:
        response = client.get("/readyz")
    finally:
        qorven.health._redis = None
    assert response.status_code == 503 and response.json()["checks"] == {"database": "ok", "redis": "unavailable"}


def test_serve_names_the_model_of_each_qor_or_says_it_is_offline(world, settings, serve_once):
    settings.OPENAI_BASE_URL, settings.QORVEN_MODEL = "", ""
    world.qor_b.main_base_url, world.qor_b.main_model = "https://models.example/v1", "big-model"
    world.qor_b.save(update_fields=["main_base_url", "main_model"])
    printed = serve_once()
    # What to do, as the README's quick start says it: `qorven setup` asks for the model and checks it.
    assert "acme/aria: offline — no model configured (run `qorven setup`, or set OPENAI_BASE_URL and " \
           "QORVEN_MODEL)" in printed
    assert "globex/aria: big-model at models.example" in printed


def test_readyz_probed_again_and_again_with_redis_away_logs_one_traceback_not_one_a_probe(client, settings, db,
                                                                                          caplog):
    """A load balancer probes every few seconds: with Redis away each probe logged the
    warning with Redis's traceback (about 40 lines), five probes five tracebacks."""
    import logging

    import qorven.health

    settings.REDIS_URL = "redis://127.0.0.1:9/0"  # nothing listens there
    qorven.health._redis = None
    qorven.health._failures.clear()  # a failure an earlier test left running would be counted, not logged
    try:
        with caplog.at_level(logging.WARNING, logger="qorven.health"):
            answers = [client.get("/readyz").status_code for _ in range(5)]
    finally:
        qorven.health._redis = None
    assert answers == [503] * 5
    said = [r for r in caplog.records if r.name == "qorven.health"]
    assert [r.exc_info is not None for r in said] == [True], [r.getMessage() for r in said]
    assert said[0].getMessage().startswith("readiness check redis_ping failed")
