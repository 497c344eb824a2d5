"""Real-format platform payloads, and the signatures the platforms put on them."""
from __future__ import annotations

import hashlib
import hmac
import json
import time

from channels_app.adapters.sms import twilio_signature

_update_id = [1000]


def telegram_update(text: str, *, user_id: int = 42, chat_id: int | None = None, chat_type: str = "private",
                    message_id: int = 1, first_name: str = "Priya", **message_fields) -> dict:
    _update_id[0] += 1
    chat = {"id": chat_id if chat_id is not None else user_id, "type": chat_type}
    if chat_type == "private":
        chat.update(first_name=first_name)
    else:
        chat.update(title="Family")
    return {
        "update_id": _update_id[0],
        "message": {
            "message_id": message_id,
            "from": {"id": user_id, "is_bot": False, "first_name": first_name, "language_code": "en"},
            "chat": chat,
            "date": int(time.time()),
            "text": text,
            **message_fields,
        },
    }


def post_telegram(client, update: dict, secret: str | None = "tg-secret-a"):
    headers = {"HTTP_X_TELEGRAM_BOT_API_SECRET_TOKEN": secret} if secret is not None else {}
    return client.post("/v1/webhooks/telegram", data=json.dumps(update), content_type="application/json", **headers)


def whatsapp_body(text: str, *, sender: str = "15550100", message_id: str = "wamid.HBgL1", name: str = "Priya",
                  phone_number_id: str = "1055") -> dict:
    return {
        "object": "whatsapp_business_account",
        "entry": [{
            "id": "WABA_ID",
            "changes": [{
                "field": "messages",
                "value": {
                    "messaging_product": "whatsapp",
                    "metadata": {"display_phone_number": "15550000", "phone_number_id": phone_number_id},
                    "contacts": [{"profile": {"name": name}, "wa_id": sender}],
                    "messages": [{"from": sender, "id": message_id, "timestamp": str(int(time.time())),
                                  "type": "text", "text": {"body": text}}],
                },
            }],
        }],
    }


def post_whatsapp(client, body: dict, app_secret: str | None = "wa-app-secret"):
    raw = json.dumps(body).encode()
    headers = {}
    if app_secret is not None:
        headers["HTTP_X_HUB_SIGNATURE_256"] = "sha256=" + hmac.new(app_secret.encode(), raw, hashlib.sha256).hexdigest()
    return client.post("/v1/webhooks/whatsapp", data=raw, content_type="application/json", **headers)


def post_email(client, body, secret="mail-secret"):
    headers = {"HTTP_X_QORVEN_EMAIL_SECRET": secret} if secret else {}
    return client.post("/v1/webhooks/email", data=json.dumps(body), content_type="application/json", **headers)


def email_body(text, message_id, in_reply_to=""):
    return {"from": "Priya <priya@example.com>", "to": "aria@acme.example", "subject": "Trip plans",
            "text": text, "message_id": message_id, "in_reply_to": in_reply_to}


def post_sms(client, params, token="twilio-token"):
    sig = twilio_signature(token, "https://qorven.example/v1/webhooks/sms", params)
    return client.post("/v1/webhooks/sms", data=params, HTTP_X_TWILIO_SIGNATURE=sig)


def telegram_scope(secret: str = "tg-secret-a") -> dict:
    """The ASGI scope of a Telegram webhook POST signed with `secret`."""
    return {"type": "http", "method": "POST", "path": "/v1/webhooks/telegram", "root_path": "", "query_string": b"",
            "scheme": "http", "server": ("testserver", 80), "client": ("127.0.0.1", 5000),
            "headers": [(b"host", b"testserver"), (b"content-type", b"application/json"),
                        (b"x-telegram-bot-api-secret-token", secret.encode())]}
