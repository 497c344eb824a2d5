"""WhatsApp's later word on a reply it accepted: Meta answers a send with an id at once and
reports a failure afterwards (a closed 24-hour window, a blocked number) in a `statuses`
webhook. Such a reply is not delivered, and the person and the admin see it so."""
from __future__ import annotations

import pytest

from channels_app.chat import chat_events
from channels_app.models import OutboundDelivery
from channels_app.services import binding_create
from sessions_app.models import Session
from sessions_app.services.append import message_append
from sessions_app.services.resolve import session_resolve

from ..fakes.model_server import reply
from ..fakes.platform_server import Canned
from .conftest import pair
from .payloads import post_whatsapp, whatsapp_body
from .test_webhook_ingest import asgi_post

pytestmark = pytest.mark.django_db(transaction=True)


def status_body(*statuses: dict, phone_number_id: str = "1055") -> dict:
    body = whatsapp_body("", phone_number_id=phone_number_id)
    value = body["entry"][0]["changes"][0]["value"]
    value.pop("messages"), value.pop("contacts")
    value["statuses"] = list(statuses)
    return body


def failed(wamid: str, code: int = 131047, title: str = "Re-engagement message") -> dict:
    return {"id": wamid, "status": "failed", "timestamp": "1764900000", "recipient_id": "15550100",
            "errors": [{"code": code, "title": title, "message": title,
                        "error_data": {"details": "Message failed to send because more than 24 hours have passed"}}]}


@pytest.fixture
def answered(client, world, whatsapp, platform, model_server, drain) -> OutboundDelivery:
    """Alice wrote on WhatsApp and her reply went out: Meta accepted it as wamid.OUT1."""
    pair(world, "whatsapp", "15550100", world.alice)
    platform.default(r"/whatsapp/.*/messages$", Canned(body={"messaging_product": "whatsapp",
                                                             "messages": [{"id": "wamid.OUT1"}]}))
    model_server.add(reply("Your meeting is at 3."))
    assert post_whatsapp(client, whatsapp_body("when is my meeting?")).status_code == 200
    drain()
    delivery = OutboundDelivery.objects.get()
    assert (delivery.state, delivery.platform_message_id) == ("sent", "wamid.OUT1")
    return delivery


def _delivery_shown(world) -> dict | None:
    session = Session.objects.get(tenant=world.tenant_a, user=world.alice, kind="canonical")
    (shown,) = [e for e in chat_events(session=session) if e.get("role") == "assistant"]
    return shown.get("delivery")


def test_a_reply_whatsapp_later_reports_failed_ends_failed_where_the_person_and_the_admin_see_it(
    client, world, answered
):
    assert _delivery_shown(world) is None
    assert post_whatsapp(client, status_body(failed("wamid.OUT1"))).status_code == 200
    answered.refresh_from_db()
    assert answered.state == "failed"
    assert "131047" in answered.last_error and "Re-engagement message" in answered.last_error
    assert _delivery_shown(world) == {"state": "failed", "platform": "whatsapp"}
    # Meta repeats a notification it thinks was not taken: the same answer, nothing else changes.
    assert post_whatsapp(client, status_body(failed("wamid.OUT1"))).status_code == 200
    assert answered.message.deliveries.get().state == "failed"


def test_sent_delivered_and_read_statuses_and_unknown_ids_change_nothing(client, world, answered):
    body = status_body({"id": "wamid.OUT1", "status": "delivered", "recipient_id": "15550100"},
                       {"id": "wamid.OUT1", "status": "read", "recipient_id": "15550100"},
                       failed("wamid.SOMEONE-ELSES"))
    assert post_whatsapp(client, body).status_code == 200
    assert OutboundDelivery.objects.get().state == "sent"
    assert _delivery_shown(world) is None


def test_a_failure_reported_through_the_server_path_is_recorded_too(world, answered):
    import hashlib
    import hmac
    import json

    raw = json.dumps(status_body(failed("wamid.OUT1"))).encode()
    signature = "sha256=" + hmac.new(b"wa-app-secret", raw, hashlib.sha256).hexdigest()
    (response,) = asgi_post(("/v1/webhooks/whatsapp", raw,
                             {"content-type": "application/json", "x-hub-signature-256": signature}))
    assert response.status_code == 200
    answered.refresh_from_db()
    assert answered.state == "failed"


def test_a_binding_reports_only_its_own_replies(client, world, whatsapp):
    """Another tenant's number sent a part Meta happened to give the same id: a report
    signed for tenant A's number cannot touch it."""
    other = binding_create(tenant=world.tenant_b, qor=world.qor_b, kind="whatsapp",
                           credentials={"phone_number_id": "2077", "token": "t", "app_secret": "other-secret",
                                        "verify_token": "v"})
    session = session_resolve(tenant=world.tenant_b, qor=world.qor_b, channel="whatsapp", user=world.charlie)
    message = message_append(session=session, role="assistant", content="hi", channel="whatsapp",
                             notify=False).message
    theirs = OutboundDelivery.objects.create(tenant=world.tenant_b, message=message, part=0, binding=other,
                                             target="15550999", text="hi", state="sent",
                                             platform_message_id="wamid.OUT1")
    assert post_whatsapp(client, status_body(failed("wamid.OUT1"))).status_code == 200
    theirs.refresh_from_db()
    assert theirs.state == "sent"


# How a failure WhatsApp reports later is taken, by Meta's code: the chat refused (our
# notice could not get there either), the account refused (nothing goes out through it),
# or a limit that passes (our notice goes out, through the send's own retries).
REPORTED = {
    "131026-undeliverable": ((131026, "Message undeliverable"), "whatsapp refused this chat"),
    "130497-country": ((130497, "Business account is restricted from messaging users in this country"),
                       "whatsapp refused this chat"),
    "131042-payment": ((131042, "Business eligibility payment issue"), "whatsapp refused the account"),
    "131031-locked": ((131031, "Business Account locked"), "whatsapp refused the account"),
    "131048-spam-limit": ((131048, "Spam rate limit hit"), ""),
    "131056-pair-limit": ((131056, "(Business Account, Consumer Account) pair rate limit hit"), ""),
}


@pytest.mark.parametrize("report", list(REPORTED))
def test_a_failure_reported_later_tells_the_person_in_our_words_where_it_can_reach_them(
    client, world, answered, platform, drain, report
):
    from sessions_app.models import Message

    (code, title), refused = REPORTED[report]
    assert post_whatsapp(client, status_body(failed("wamid.OUT1", code=code, title=title))).status_code == 200
    drain()
    answered.refresh_from_db()
    assert answered.state == "failed" and str(code) in answered.last_error  # Meta's word, for the admin
    assert answered.last_error.startswith(refused)
    (notice,) = Message.objects.filter(role="system", metadata__notice="reply_undelivered")
    assert notice.content.startswith("My last reply may not have reached you.") and title not in notice.content
    (part,) = OutboundDelivery.objects.filter(message=notice)
    bodies = [s.json["text"]["body"] for s in platform.sent(r"/whatsapp/.*/messages$")]
    if refused:  # stored, shown on the page, not sent where it could only fail too
        assert (part.state, part.attempts) == ("failed", 0) and refused in part.last_error
        assert bodies == ["Your meeting is at 3."]
    else:
        assert part.state == "sent" and bodies == ["Your meeting is at 3.", notice.content]
