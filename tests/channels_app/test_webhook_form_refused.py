"""A form-encoded webhook (Twilio's SMS) that Django will not read as a form is refused
as a bad request under `qorven serve`, as Django's own handler refuses it, before any
signature is checked: anyone may post one."""
from __future__ import annotations

import logging

import pytest

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
