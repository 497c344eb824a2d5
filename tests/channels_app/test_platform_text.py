"""What a person writes on a platform is stored as they wrote it, whatever the platform's
wire format does to it (Slack's escaping and link markup)."""
from __future__ import annotations

import pytest

from channels_app.inbound import fitting_id
from sessions_app.models import Message

from ..fakes.model_server import reply
from .conftest import pair
from .test_slack_discord_email_sms import post_slack, slack, slack_event  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("wire, written", [
    ("if a &lt; b &amp;&amp; c &gt; d", "if a < b && c > d"),
    ("`x =&gt; x &lt;&lt; 2` and &amp;lt; itself", "`x => x << 2` and &lt; itself"),
    ("see <https://example.com/a?x=1&amp;y=2|the docs>", "see the docs (https://example.com/a?x=1&y=2)"),
    ("see <https://example.org>", "see https://example.org"),
    ("see <http://example.net|example.net>", "see example.net"),
    ("mail <mailto:priya@example.com|priya@example.com>", "mail priya@example.com"),
    ("ask <@UBOT> in <#C0GEN|general>, <!here>", "ask <@UBOT> in #general, @here"),
    ("مرحبا &lt;3 😀", "مرحبا <3 😀"),
], ids=["entities", "code", "named-link", "bare-link", "auto-link", "mailto", "mentions", "rtl-emoji"])
@pytest.mark.usefixtures("slack")
def test_a_slack_message_is_stored_as_the_person_wrote_it(client, world, platform, model_server, drain, wire, written):
    """Slack sends &, < and > escaped and links as <url|label>; the model, the page and the
    other surfaces read the person's own text."""
    pair(world, "slack", "U0PRIYA", world.alice)
    model_server.add(reply("ok"))
    assert post_slack(client, slack_event(wire)).status_code == 200
    drain()
    assert Message.objects.get(role="user").content == written
    assert model_server.requests[0]["messages"][-1]["content"].endswith(written)


@pytest.mark.usefixtures("email")
def test_an_email_with_a_very_long_sender_name_and_message_id_is_stored_and_answered(client, world, model_server,
                                                                                     drain, mailoutbox):
    """A From name (one person's whole signature, 300 characters of it), a Message-ID, or a
    thread's References and subject longer than the columns that held them: on PostgreSQL
    the webhook failed (and the mail was delivered again for ever) or the reply could not
    be planned."""
    from .payloads import email_body, post_email

    pair(world, "email", "priya@example.com", world.alice)
    model_server.add(reply("Booked."))
    body = email_body("book the table", "<" + "m" * 300 + "@mail.example>")
    body["from"] = '"' + "Priya Raman 🌸 مرحبا " * 15 + '" <priya@example.com>'
    body["subject"] = "Re: 予約 — " + "dinner on Friday, " * 8
    body["references"] = " ".join(f"<{i}.thread-{i:04d}@mail.example.com>" for i in range(6))
    assert post_email(client, body).status_code == 200
    drain()
    question = Message.objects.get(role="user")
    assert question.content.endswith("book the table")
    assert question.sender_name.startswith("Priya Raman 🌸 مرحبا") and len(question.sender_name) <= 200
    assert Message.objects.get(role="assistant").content == "Booked."
    (sent,) = mailoutbox
    assert sent.body == "Booked." and sent.subject == " ".join(body["subject"].split())
    assert sent.extra_headers["References"].endswith(body["message_id"])  # the real id: mail clients thread by it
    assert Message.objects.get(role="user").external_id == fitting_id(body["message_id"])
