"""Which of the model's links a platform may show as a link, its address behind a label.

A reply's text comes from the model, and what the model writes can come from whoever wrote
what it read: a web page, a file, a message forwarded to it. So a link is made a platform's
link only when it leads to a web or mail address (http, https, mailto) and its label names
no other place. Any other target is markup of the platform's own once behind a label —
Slack's `<!channel|…>`, `<!subteam^…>` and `<@U…>` notify a whole channel, a group or a
person, Telegram's `tg://user?id=…` mentions someone — and a label that names a site
(`bank.example`, `https://bank.example`, `help@bank.example`) while the address is
another's reads as that site. Such a link is written as its label followed by its address
in the open, which the person sees before they tap it.
"""
from __future__ import annotations

import re
from urllib.parse import urlsplit

LINKED_SCHEMES = frozenset({"http", "https", "mailto"})

# A host name or IPv4 address in a label, with or without a scheme, a user@ before it or a
# path after it: "bank.example", "www.bank.example/login", "https://10.0.0.1", "help@bank.example".
# The last label of a name is letters only (2+): "3.14", "v1.2" and "e.g." name no site.
_PLACE = re.compile(
    r"(?<![\w.-])(?:(?:[a-z][a-z0-9+.-]*:)?//)?(?:[\w.+-]+@)?"
    r"((?:[a-z0-9](?:[a-z0-9-]*[a-z0-9])?\.)+[a-z]{2,}|\d{1,3}(?:\.\d{1,3}){3})(?![\w-])",
    re.IGNORECASE,
)


def _host(href: str) -> str:
    parts = urlsplit(href)
    if parts.scheme.lower() == "mailto":
        return parts.path.rpartition("@")[2].split("?")[0].lower().rstrip(".")
    return (parts.hostname or "").rstrip(".")


def linkable(href: str, label: str) -> bool:
    """Whether the link to `href` labelled `label` (its plain text) may be written as the
    platform's link: a web or mail address whose label names no other place than it (a
    label naming `bank.example` leads to it or one of its hosts, `www.bank.example`; one
    naming `www.bank.example`, to it or to `bank.example`)."""
    parts = urlsplit(href)
    scheme = parts.scheme.lower()
    if scheme not in LINKED_SCHEMES or scheme != "mailto" and not parts.netloc:
        return False
    host = _host(href)
    for named in _PLACE.findall(label):
        named = named.lower().rstrip(".")
        if host != named and not host.endswith("." + named) and named != "www." + host:
            return False
    return True
