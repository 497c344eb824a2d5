"""What Slack reads in a chat.postMessage's mrkdwn text: every `<…>` is markup
(api.slack.com/reference/surfaces/formatting): `<!channel>`, `<!here>`, `<!everyone>` and
`<!subteam^ID>` notify a whole channel or a group, `<@U…>` a person, `<#C…>` links a
channel, anything else is a link to its address, shown as its label (after `|`) when it
has one. `&lt;`, `&gt;` and `&amp;` are text."""
from __future__ import annotations

import re
from dataclasses import dataclass

_MARKUP = re.compile(r"<([^<>]*)>")


@dataclass(frozen=True)
class Markup:
    kind: str  # "ping" (a group or a person notified), "channel", "link"
    target: str
    label: str


def slack_markup(text: str) -> list[Markup]:
    """Each `<…>` of `text` as Slack reads it."""
    found = []
    for match in _MARKUP.finditer(text):
        target, _, label = match.group(1).partition("|")
        if target.startswith(("!", "@")):
            found.append(Markup("ping", target, label))
        elif target.startswith("#"):
            found.append(Markup("channel", target, label))
        else:
            found.append(Markup("link", target, label))
    return found
