"""A webhook body of a shape we do not read, looked at before any signature is checked
(anyone may post one), is refused as a bad request under `qorven serve`, as Django's own
handler refuses a form it will not read: never a 500 with a traceback."""
from __future__ import annotations

import json
import logging
import sys

import pytest

from channels_app import json_body
from channels_app.models import InboundEvent

from .test_webhook_ingest import asgi_post

pytestmark = pytest.mark.django_db(transaction=True)


def test_an_sms_webhook_of_more_fields_than_django_reads_is_a_400_with_no_traceback(world, sms, caplog):
    """2,000 fields (Django reads at most DATA_UPLOAD_MAX_NUMBER_FIELDS, 1,000) raised
    TooManyFieldsSent out of the storing thread's reading: a 500 and a traceback logged as
    an error for each post, by anyone, with any signature."""
    body = "&".join(f"f{i}=x" for i in range(2000)).encode()
    with caplog.at_level(logging.INFO):
        (response,) = asgi_post(("/v1/webhooks/sms", body, {"content-type": "application/x-www-form-urlencoded",
                                                            "x-twilio-signature": "guessed"}))
    assert response.status_code == 400
    assert response.json() == {"error": "the body is not a form we read"}
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not InboundEvent.objects.exists()


@pytest.mark.parametrize("body", [{"entry": 5}, {"entry": [{"changes": 5}]}], ids=["entry", "changes"])
def test_a_whatsapp_webhook_whose_entries_are_not_lists_is_a_400_with_no_traceback(world, caplog, body):
    """Read for its phone number before any signature is checked: a number where Meta
    sends a list raised TypeError out of the storing thread, a 500 and a traceback logged
    as an error for each post, by anyone."""
    with caplog.at_level(logging.INFO):
        (response,) = asgi_post(("/v1/webhooks/whatsapp", json.dumps(body).encode(),
                                 {"content-type": "application/json", "x-hub-signature-256": "sha256=00"}))
    assert response.status_code == 400
    assert response.json() == {"error": "body is not WhatsApp JSON"}
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_a_webhook_body_of_a_third_of_a_million_arrays_is_refused_before_it_is_parsed(world, caplog):
    """Read on the event loop that answers every request of the server (the screening),
    before any signature is checked: a megabyte of empty arrays took Python's parser and
    our check of it 1.3 s there (and every other request, webhook or chat, waited). A body
    of more objects and arrays than any platform sends is refused unread."""
    body = ("[" + "[]," * 330_000 + "[]]").encode()
    (response,) = asgi_post(("/v1/webhooks/whatsapp", body,
                             {"content-type": "application/json", "x-hub-signature-256": "sha256=00"}))
    assert response.status_code == 400
    assert response.json() == {"error": "the body holds more than 10,000 objects and arrays"}
    with pytest.raises(json_body.BodyRefused), _lines_run() as run:
        json_body.json_parse(body)
    assert run["json.loads"] == 0  # refused on the count of its brackets, unparsed


def test_a_webhook_body_of_half_a_million_numbers_among_some_arrays_is_read_without_a_walk_of_every_value(world):
    """More than 64 arrays made the depth and surrogate check walk every value of the
    parsed body in Python: 71 arrays and 450,000 numbers took 0.5 s of the event loop,
    posted by anyone before any signature is checked. The depth is read off the text's
    brackets now, and strings are checked by encoding them."""
    body = ("[" + "[]," * 70 + "0," * 450_000 + "0]").encode()
    (response,) = asgi_post(("/v1/webhooks/whatsapp", body,
                             {"content-type": "application/json", "x-hub-signature-256": "sha256=00"}))
    assert response.status_code == 400  # a list, not WhatsApp's object
    with _lines_run() as run:
        parsed = json_body.json_parse(body)
    assert len(parsed) == 71 + 450_000
    # Counted, not timed: a few lines per bracket (443 here), where the walk ran a few
    # per value (millions).
    assert run["lines"] < 1_000


class _lines_run:
    """Counts the Python lines json_body runs on this thread (settrace: the same count
    on a loaded machine as on an idle one), and whether json.loads was called."""

    def __enter__(self) -> dict[str, int]:
        self.run = {"lines": 0, "json.loads": 0}
        module = json_body.__file__

        def trace(frame, event, arg):
            if event == "call" and frame.f_code.co_name == "loads" and frame.f_globals.get("__name__") == "json":
                self.run["json.loads"] += 1
            if frame.f_code.co_filename != module:
                return None
            if event == "line":
                self.run["lines"] += 1
            return trace

        self.previous = sys.gettrace()
        sys.settrace(trace)
        return self.run

    def __exit__(self, *exc: object) -> None:
        sys.settrace(self.previous)
