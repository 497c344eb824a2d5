"""What an email webhook's To, Cc and From cost to read: anyone may post to the webhook
with any secret, and its addresses are read before the secret is checked (the screening
reads them on the server's event loop, the storing thread again), so how much is read of
them is bounded, and no text of them makes the read fail."""
from __future__ import annotations

import json
import logging

import pytest

from channels_app.models import InboundEvent

from .payloads import email_body
from .test_webhook_ingest import asgi_post

pytestmark = pytest.mark.django_db(transaction=True)


def _email(body: dict, secret: str) -> tuple[str, bytes, dict[str, str]]:
    return ("/v1/webhooks/email", json.dumps(body).encode(),
            {"content-type": "application/json", "x-qorven-email-secret": secret})


@pytest.mark.parametrize("field", ["to", "cc"])
def test_an_email_whose_addresses_nest_comments_deeper_than_python_reads_is_refused_not_a_server_error(
        world, email, caplog, field):
    """600 "(" in To or Cc (a comment in a comment, 600 deep) ran Python's address parser
    out of stack: RecursionError, a 500 and a traceback of 2,000 lines logged, for each
    post by anyone."""
    body = {**email_body("x", "<deep@example.com>"), field: "(" * 600 + "aria@acme.example"}
    with caplog.at_level(logging.INFO):
        (response,) = asgi_post(_email(body, "guess"))
    assert response.status_code == 400
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not InboundEvent.objects.exists()


def test_an_email_from_a_sender_whose_name_nests_comments_too_deep_is_taken_and_ignored(world, email, caplog):
    """A stranger writing to the bound address with such a From made its mail service's
    post a 500, posted again and again; it is answered as an email of no readable sender."""
    body = {**email_body("x", "<from@example.com>"), "from": "(" * 600 + "priya@example.com"}
    with caplog.at_level(logging.INFO):
        (response,) = asgi_post(_email(body, "mail-secret"))
    assert response.status_code == 200
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not InboundEvent.objects.exists()


def test_a_megabyte_of_addresses_posted_by_anyone_is_refused_after_reading_only_their_first(world, email):
    """A To of a megabyte of "@" took Python's address parser 1.5 s on the event loop that
    screens every webhook (and every other request of the server waited), then 1.5 s more
    on the thread that stores every binding's webhooks; what is read of To and Cc is now
    bounded (channels_app.adapters.email.MAX_ADDRESS_TEXT)."""
    body = {**email_body("x", "<many@example.com>"), "to": "@" * 1_000_000}
    (response,) = asgi_post(_email(body, "guess"))
    assert response.status_code == 401
    assert not InboundEvent.objects.exists()


def test_an_address_named_past_the_first_16_384_characters_of_to_and_cc_is_not_read(world, email):
    """The bound is on what is read, shown by what is found (not by a clock): the bound
    address read first is taken; named after 400 others (18 KB of them, fewer than the 500
    addresses read at most), it is never read, so its secret is not checked against it and
    nothing is stored."""
    others = ", ".join(f"someone.with.a.long.name{i:03}@nowhere.example" for i in range(400))
    assert 16_384 < len(others) < 20_000
    late = {**email_body("late", "<late@example.com>"), "to": f"{others}, aria@acme.example"}
    (response,) = asgi_post(_email(late, "mail-secret"))
    assert response.status_code == 401
    assert not InboundEvent.objects.exists()
    early = {**email_body("early", "<early@example.com>"), "to": f"aria@acme.example, {others}"}
    (response,) = asgi_post(_email(early, "mail-secret"))
    assert response.status_code == 200
    assert InboundEvent.objects.count() == 1
