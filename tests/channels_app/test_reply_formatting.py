"""A reply reads formatted on every platform: the model's Markdown is stored as written and
sent in each platform's own formatting (Telegram's HTML, Slack's mrkdwn, WhatsApp's),
split to the platform's limit without breaking a code block or a tag; text of ours and what
people wrote, quoted in it, is never read as formatting."""
from __future__ import annotations

import pytest

from channels_app.models import OutboundDelivery
from sessions_app.models import Message

from ..factories.heartbeats_app import beat
from ..fakes.chat_markers import code_blocks, formatted, shown
from ..fakes.model_server import reply
from ..fakes.telegram_html import visible_text
from .conftest import answered_on_telegram, pair, replies_waiting
from .payloads import post_sms, post_telegram, post_whatsapp, telegram_update, whatsapp_body
from .test_slack_discord_email_sms import (  # noqa: F401 (fixtures)
    DM_CREATE,
    discord,
    discord_key,
    post_slack,
    slack,
    slack_event,
)

pytestmark = pytest.mark.django_db(transaction=True)

ANSWER = """# Plan

**Bold** and *italic*, ~~old~~, `a<b` and [the docs](https://example.com/a?x=1&y=2).

- one
- two

1. first
2. second

> quoted

```python
if a < b and c > d:
    pass
```"""


def test_a_telegram_reply_in_markdown_is_sent_as_telegrams_html_and_stored_as_written(
    client, world, telegram, platform, model_server, drain
):
    sent = answered_on_telegram(client, world, platform, model_server, drain, asked="plan?", answer=ANSWER)
    assert sent.json == {"chat_id": "42", "parse_mode": "HTML", "text": (
        "<b>Plan</b>\n\n"
        "<b>Bold</b> and <i>italic</i>, <s>old</s>, <code>a&lt;b</code> and "
        '<a href="https://example.com/a?x=1&amp;y=2">the docs</a>.\n\n'
        "• one\n• two\n\n"
        "1. first\n2. second\n\n"
        "<blockquote>quoted</blockquote>\n\n"
        '<pre><code class="language-python">if a &lt; b and c &gt; d:\n    pass</code></pre>'
    )}
    assert Message.objects.get(role="assistant").content == ANSWER


def test_what_telegram_would_read_as_html_in_a_reply_is_escaped(client, world, telegram, platform, model_server, drain):
    sent = answered_on_telegram(client, world, platform, model_server, drain, asked="html?",
                                answer='Use <div class="x"> & &amp; "quotes" when 3 > 2')
    assert sent.json["text"] == 'Use &lt;div class="x"&gt; &amp; &amp; "quotes" when 3 &gt; 2'
    assert visible_text(sent.json["text"]) == 'Use <div class="x"> & & "quotes" when 3 > 2'


def test_a_part_telegram_cannot_parse_is_sent_once_more_as_plain_text(world, telegram, platform, drain):
    """A part planned as text before replies were formatted (or any part Telegram refuses to
    parse): its refused request delivered nothing, so it goes again as plain text, once."""
    from channels_app.tasks import deliver_message_task

    pair(world, "telegram", "42", world.alice)
    (message,) = replies_waiting(world, telegram, ["<b>Steps</b> for a <c & d>"])
    deliver_message_task.delay(world.tenant_a.pk, message.pk)
    drain()
    refused, plain = platform.sent("sendMessage")
    assert refused.json == {"chat_id": "42", "parse_mode": "HTML", "text": "<b>Steps</b> for a <c & d>"}
    assert plain.json == {"chat_id": "42", "text": "Steps for a <c & d>"}
    part = OutboundDelivery.objects.get()
    assert (part.state, part.attempts, part.last_error) == ("sent", 1, "")


def test_a_part_sent_again_as_plain_text_keeps_every_link_address_that_fits(world, telegram, platform, drain):
    """Spelling every address after its label would pass Telegram's 4096: those that fit
    are kept, in order, not all of them dropped for the one that does not."""
    from channels_app.tasks import deliver_message_task

    first, second = "https://a.example/" + "x" * 100, "https://b.example/" + "z" * 300
    part = f'<a href="{first}">first</a> {"y" * 3900} <a href="{second}">second</a> <c & d>'
    pair(world, "telegram", "42", world.alice)
    (message,) = replies_waiting(world, telegram, [part])
    deliver_message_task.delay(world.tenant_a.pk, message.pk)
    drain()
    _, plain = platform.sent("sendMessage")
    assert plain.json["text"] == f"first ({first}) {'y' * 3900} second <c & d>"
    assert OutboundDelivery.objects.get().state == "sent"


def test_a_long_formatted_reply_is_split_with_its_code_block_closed_and_reopened_in_each_part(
    client, world, telegram, platform, model_server, drain
):
    code = [f"    total += item_{n} * weight  # step {n}" for n in range(300)]
    answer = ("**Here is the script** — run it with `python run.py`:\n\n```python\ndef run():\n"
              + "\n".join(code) + "\n```\n\nThat's *all* & it's done.")
    pair(world, "telegram", "42", world.alice)
    model_server.add(reply(answer))
    post_telegram(client, telegram_update("script?"))
    drain()
    parts = [sent.json for sent in platform.sent("sendMessage")]
    assert len(parts) >= 4 and all(p["parse_mode"] == "HTML" for p in parts)
    shown = [visible_text(p["text"]) for p in parts]  # each part parses on its own: every tag is closed in it
    assert all(len(s.encode("utf-16-le")) // 2 <= 4096 for s in shown)
    assert parts[0]["text"].startswith("<b>Here is the script</b> — run it with <code>python run.py</code>:")
    assert parts[-1]["text"].endswith("That's <i>all</i> &amp; it's done.")
    blocks = [p["text"] for p in parts if '<pre><code class="language-python">' in p["text"]]
    assert len(blocks) >= 3 and all(b.count("<pre>") == b.count("</pre>") == 1 for b in blocks)
    lines = [line for s in shown for line in s.splitlines()]
    assert [line for line in lines if line.startswith("    total")] == code  # every line once, in order
    assert set(OutboundDelivery.objects.values_list("state", flat=True)) == {"sent"}


def test_telegram_counts_a_parts_length_on_the_text_it_shows_not_its_tags(
    client, world, telegram, platform, model_server, drain
):
    links = " ".join(f"[doc {n}](https://docs.example.com/{'section/' * 10}{n})" for n in range(60))
    sent = answered_on_telegram(client, world, platform, model_server, drain, asked="docs?", answer=links)
    assert len(sent.json["text"]) > 4096 and visible_text(sent.json["text"]).startswith("doc 0 doc 1")


def test_a_persons_own_text_quoted_in_history_is_not_formatted_on_telegram(
    client, world, telegram, platform, model_server, drain
):
    typed = "see [click](https://x.example) &amp; 2 < 3, *stars*, my_file_name and **this**"
    pair(world, "telegram", "42", world.alice)
    model_server.add(reply("Noted **that**."))
    post_telegram(client, telegram_update(typed, message_id=1))
    drain()
    post_telegram(client, telegram_update("/history", message_id=2))
    drain()
    sent = platform.sent("sendMessage")[-1].json
    assert sent["parse_mode"] == "HTML" and "<" not in sent["text"].replace("&lt;", "")  # no tag at all
    asked, answered = visible_text(sent["text"]).splitlines()
    assert asked.endswith(": see [click] (https://x.example) &amp; 2 ‹ 3, ∗stars∗, myˍfileˍname and ∗∗this∗∗")
    assert answered.endswith(": Noted ∗∗that∗∗.")


def test_a_slack_reply_in_markdown_is_sent_as_mrkdwn(client, world, slack, platform, model_server, drain):  # noqa: F811
    pair(world, "slack", "U0PRIYA", world.alice)
    model_server.add(reply(ANSWER))
    post_slack(client, slack_event("plan?"))
    drain()
    (sent,) = platform.sent("chat.postMessage")
    assert sent.json["text"] == (
        "*Plan*\n\n"
        "*Bold* and _italic_, ~old~, `a&lt;b` and <https://example.com/a?x=1&amp;y=2|the docs>.\n\n"
        "• one\n• two\n\n"
        "1. first\n2. second\n\n"
        "&gt; quoted\n\n"
        "```\nif a &lt; b and c &gt; d:\n    pass\n```"
    )


def test_a_whatsapp_reply_in_markdown_is_sent_in_whatsapps_formatting(client, world, whatsapp, platform, model_server,
                                                                      drain):
    pair(world, "whatsapp", "15550100", world.alice)
    model_server.add(reply(ANSWER))
    assert post_whatsapp(client, whatsapp_body("plan?")).status_code == 200
    drain()
    (sent,) = platform.sent(r"/whatsapp/v21.0/1055/messages")
    assert sent.json["text"]["body"] == (
        "*Plan*\n\n"
        "*Bold* and _italic_, ~old~, `a<b` and the docs (https://example.com/a?x=1&y=2).\n\n"
        "• one\n• two\n\n"
        "1. first\n2. second\n\n"
        "> quoted\n\n"
        "```if a < b and c > d:\n    pass```"
    )


# A Markdown example in a reply: its code block holds lines of three backticks, fenced with four.
FENCED_EXAMPLE = """Fence code like this:

````markdown
```python
print("hi")
```
````

Done."""
EXAMPLE_CODE = '```python\nprint("hi")\n```'


def test_a_code_block_holding_three_backticks_shows_whole_on_slack(client, world, slack, platform, model_server,  # noqa: F811
                                                                   drain):
    pair(world, "slack", "U0PRIYA", world.alice)
    model_server.add(reply(FENCED_EXAMPLE))
    post_slack(client, slack_event("fences?"))
    drain()
    (sent,) = platform.sent("chat.postMessage")
    blocks, outside = code_blocks(sent.json["text"])
    assert blocks == [EXAMPLE_CODE]
    assert outside == "Fence code like this:\n\n\n\nDone."


def test_a_code_block_holding_three_backticks_shows_whole_on_whatsapp(client, world, whatsapp, platform, model_server,
                                                                      drain):
    pair(world, "whatsapp", "15550100", world.alice)
    model_server.add(reply(FENCED_EXAMPLE))
    assert post_whatsapp(client, whatsapp_body("fences?")).status_code == 200
    drain()
    (sent,) = platform.sent(r"/whatsapp/v21.0/1055/messages")
    blocks, outside = code_blocks(sent.json["text"]["body"])
    assert blocks == [EXAMPLE_CODE]
    assert outside == "Fence code like this:\n\n\n\nDone."


def test_a_discord_reply_keeps_its_markdown_which_discord_renders(world, platform, model_server, drain, discord):  # noqa: F811
    from channels_app.adapters import adapter_for
    from channels_app.receive import inbound_receive

    pair(world, "discord", "80351110224678912", world.alice)
    model_server.add(reply(ANSWER))
    inbound_receive(binding=discord, message=adapter_for("discord").from_gateway(discord, DM_CREATE, "9001"))
    drain()
    (sent,) = platform.sent("/messages")
    assert sent.json["content"] == ANSWER


def test_a_code_block_holding_three_backticks_shows_whole_on_discord(world, platform, model_server, drain,
                                                                     discord):  # noqa: F811
    """Discord's client reads no longer fence: its code block ends at the next three backticks."""
    from channels_app.adapters import adapter_for
    from channels_app.receive import inbound_receive

    pair(world, "discord", "80351110224678912", world.alice)
    model_server.add(reply(FENCED_EXAMPLE))
    inbound_receive(binding=discord, message=adapter_for("discord").from_gateway(discord, DM_CREATE, "9001"))
    drain()
    (sent,) = platform.sent("/messages")
    blocks, outside = code_blocks(sent.json["content"], languages=True)
    assert blocks == [EXAMPLE_CODE]
    assert outside == "Fence code like this:\n\n\n\nDone."
    assert Message.objects.get(role="assistant").content == FENCED_EXAMPLE


def test_an_sms_reply_reads_as_plain_text(client, world, sms, platform, model_server, drain):
    pair(world, "sms", "+15557654321", world.alice)
    model_server.add(reply("**Booked** for *Friday*: [the menu](https://osteria.example/menu)\n\n- wine\n- `bread`"))
    params = {"MessageSid": "SM1", "AccountSid": "AC123", "From": "+15557654321", "To": "+15550001111", "Body": "hi"}
    assert post_sms(client, params).status_code == 200
    drain()
    (sent,) = platform.sent(r"/Messages.json")
    assert sent.form["Body"] == "Booked for Friday: the menu (https://osteria.example/menu)\n\n• wine\n• bread"


def test_a_command_answer_on_whatsapp_shows_its_stars_and_underscores_as_written(client, world, whatsapp, platform,
                                                                               drain):
    pair(world, "whatsapp", "15550100", world.alice)
    beat(world.qor_a, name="_nightly_ *backup* of my_file_name", cron="*/30 * * * *", owner=world.alice)
    assert post_whatsapp(client, whatsapp_body("/beats")).status_code == 200
    drain()
    body = platform.sent(r"/whatsapp/v21.0/1055/messages")[-1].json["text"]["body"]
    assert formatted(body) == []
    assert "_nightly_ *backup* of my_file_name: `*/30 * * * *`" in shown(body)
    assert "my_file_name" in body  # inside a word nothing formats: left as it is


# A heading the platform shows in bold, holding bold of its own and more; a table's header the same.
NESTED_IN_BOLD = ("# **Plan** for *today*, `ls` and [**the docs**](https://example.com)\n\n"
                  "**All of *it* and **more****\n\n| **item** | *price* |\n|---|---|\n| a | 1 |")


def test_bold_inside_a_heading_on_slack_is_bold_once_with_no_stars_shown(client, world, slack, platform,  # noqa: F811
                                                                          model_server, drain):
    pair(world, "slack", "U0PRIYA", world.alice)
    model_server.add(reply(NESTED_IN_BOLD))
    post_slack(client, slack_event("plan?"))
    drain()
    (sent,) = platform.sent("chat.postMessage")
    assert sent.json["text"] == (
        "*Plan for _today_, `ls` and <https://example.com|the docs>*\n\n"
        "*All of _it_ and more*\n\n*item | _price_*\na | 1"
    )


def test_bold_inside_a_heading_on_whatsapp_is_bold_once_with_no_stars_shown(client, world, whatsapp, platform,
                                                                             model_server, drain):
    pair(world, "whatsapp", "15550100", world.alice)
    model_server.add(reply(NESTED_IN_BOLD))
    assert post_whatsapp(client, whatsapp_body("plan?")).status_code == 200
    drain()
    (sent,) = platform.sent(r"/whatsapp/v21.0/1055/messages")
    assert sent.json["text"]["body"] == (
        "*Plan for _today_, `ls` and the docs (https://example.com)*\n\n"
        "*All of _it_ and more*\n\n*item | _price_*\na | 1"
    )
    assert formatted(sent.json["text"]["body"]) == [
        "*Plan for _today_, `ls` and the docs (https://example.com)*", "*All of _it_ and more*", "*item | _price_*"]


def test_bold_inside_a_heading_on_telegram_is_one_bold_tag(client, world, telegram, platform, model_server, drain):
    sent = answered_on_telegram(client, world, platform, model_server, drain, asked="plan?", answer=NESTED_IN_BOLD)
    assert sent.json["text"] == (
        '<b>Plan for <i>today</i>, <code>ls</code> and <a href="https://example.com">the docs</a></b>\n\n'
        "<b>All of <i>it</i> and more</b>\n\n<b>item | <i>price</i></b>\na | 1"
    )
