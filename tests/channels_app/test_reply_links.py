"""A reply's links notify nobody and lead where they say: what the model writes may come
from whoever wrote what it read (a web page, a file, a forwarded message), and a link to
Slack's or Telegram's own markup behind a label notified a whole channel, a group or a
person, and a label naming one site led to another (channels_app.formatting.links)."""
from __future__ import annotations

import pytest

from ..fakes.model_server import reply
from ..fakes.slack_mrkdwn import slack_markup
from ..fakes.telegram_html import visible_text
from .conftest import answered_on_telegram, pair
from .test_slack_discord_email_sms import post_slack, slack, slack_event  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db(transaction=True)

PINGS = """Done! [Read this](!channel), [see](!here|here) and [everyone](!everyone).
Ask [the team](!subteam^S0TEAM) or [your boss](@U0BOSS) in [general](#C0GEN), or [ ](!channel).
The [docs](https://example.com/docs) stay a link."""

DISGUISED = """Log in at [bank.example](https://evil.example/login), [https://bank.example](https://evil.example),
[www.bank.example/login](http://10.0.0.9/x) or write to [help@bank.example](mailto:thief@evil.example).
[example.com](https://www.example.com/a), [www.example.com](https://example.com/b) and
[the menu](https://osteria.example/menu) lead where they say."""


def _slack_reply(client, world, platform, model_server, drain, answer: str) -> str:
    pair(world, "slack", "U0PRIYA", world.alice)
    model_server.add(reply(answer))
    post_slack(client, slack_event("and?"))
    drain()
    (sent,) = platform.sent("chat.postMessage")
    return sent.json["text"]


def test_a_slack_reply_linking_to_slacks_own_markup_notifies_nobody(client, world, slack, platform, model_server,  # noqa: F811
                                                                    drain):
    text = _slack_reply(client, world, platform, model_server, drain, PINGS)
    assert [m for m in slack_markup(text) if m.kind != "link"] == []
    assert [(m.target, m.label) for m in slack_markup(text)] == [("https://example.com/docs", "docs")]
    assert "Read this (!channel)" in text and "your boss (@U0BOSS)" in text  # where it led, as text


def test_a_slack_link_whose_label_names_another_site_shows_its_address(client, world, slack, platform,  # noqa: F811
                                                                       model_server, drain):
    text = _slack_reply(client, world, platform, model_server, drain, DISGUISED)
    links = [(m.target, m.label) for m in slack_markup(text)]
    assert links == [("https://www.example.com/a", "example.com"), ("https://example.com/b", "www.example.com"),
                     ("https://osteria.example/menu", "the menu")]
    assert "bank.example (https://evil.example/login)" in text
    assert "help@bank.example (mailto:thief@evil.example)" in text


def test_a_telegram_reply_mentions_nobody_by_link_and_shows_where_a_disguised_link_leads(
    client, world, telegram, platform, model_server, drain
):
    answer = "Ask [Alice](tg://user?id=123456) or see [bank.example](https://evil.example/login) and [docs](https://example.com)."
    sent = answered_on_telegram(client, world, platform, model_server, drain, asked="who?", answer=answer)
    text = sent.json["text"]
    assert text.count("<a ") == 1 and '<a href="https://example.com">docs</a>' in text
    assert visible_text(text) == ("Ask Alice (tg://user?id=123456) or see bank.example (https://evil.example/login) "
                                  "and docs.")
