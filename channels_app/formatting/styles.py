"""How each platform is written to (channels_app.formatting.render.Style): Telegram's HTML
parse mode, Slack's mrkdwn, WhatsApp's formatting, plain text (SMS), and Markdown as
written (an e-mail reads well in it; Discord renders it, its code blocks fenced its way)."""
from __future__ import annotations

import html
import re
from typing import Any

from markdown_it.token import Token

from tenancy.zero_width import ZERO_WIDTH_SPACE

from .links import linkable
from .render import Style, wrapped_per_line

PLAIN = Style()


class AsWritten(Style):
    """The model's Markdown goes as written: the platform renders it (Discord) or it reads
    well as it is (e-mail). Text of ours too."""

    def markdown(self, markdown: str, env: dict[str, Any] | None = None) -> str:
        return markdown

    def parsed(self, markdown: str, tokens: list[Token]) -> str:
        return markdown


AS_WRITTEN = AsWritten()

# Telegram's HTML: the tags we write, and the entities it decodes (any other `&` it keeps).
_TELEGRAM_TAG = re.compile(r"</?(?:b|i|s|u|code|pre|a|blockquote)(?:\s[^>]*)?>")
_TELEGRAM_LINK = re.compile(r'<a href="([^"]*)">(.*?)</a>', re.DOTALL)
_TELEGRAM_ENTITY = re.compile(r"&(?:(lt|gt|amp|quot)|#(\d+)|#x([0-9a-fA-F]+));")
_NAMED = {"lt": "<", "gt": ">", "amp": "&", "quot": '"'}
_LANGUAGE = re.compile(r"[^\w+#.-]")


def _entity(match: re.Match[str]) -> str:
    named, decimal, hexa = match.groups()
    if named:
        return _NAMED[named]
    code = int(decimal) if decimal else int(hexa, 16)
    return chr(code) if code <= 0x10FFFF else match.group()


class TelegramHtml(Style):
    """Telegram's HTML parse mode (core.telegram.org/bots/api#html-style): b, i, s, code,
    pre with the language on its code, a href and blockquote; &, < and > escaped
    everywhere else. Telegram counts its 4096 characters on the text it shows, tags read."""

    def text(self, text: str) -> str:
        return html.escape(text, quote=False)

    def bold(self, inner: str) -> str:
        return f"<b>{inner}</b>"

    def italic(self, inner: str) -> str:
        return f"<i>{inner}</i>"

    def strike(self, inner: str) -> str:
        return f"<s>{inner}</s>"

    def code(self, code: str) -> str:
        return f"<code>{self.text(code)}</code>"

    def pre(self, code: str, language: str) -> str:
        language = _LANGUAGE.sub("", language)
        if language:
            return f'<pre><code class="language-{language}">{self.text(code)}</code></pre>'
        return f"<pre>{self.text(code)}</pre>"

    def link(self, inner: str, href: str, label: str) -> str:
        if _same_place(label, href):
            return inner  # Telegram links a URL or an address shown as it is
        if not linkable(href, label):
            return super().link(inner, href, label)  # the address in the open (channels_app.formatting.links)
        return f'<a href="{html.escape(href, quote=True)}">{inner if inner.strip() else self.text(href)}</a>'

    def quote(self, inner: str, *, nested: bool) -> str:
        # Telegram's quotes cannot be nested: one inside another reads as quoted lines in it.
        if nested:
            return "\n".join(f"&gt; {line}" if line else "&gt;" for line in inner.split("\n"))
        return f"<blockquote>{inner}</blockquote>"

    def visible(self, written: str) -> str:
        return _TELEGRAM_ENTITY.sub(_entity, _TELEGRAM_TAG.sub("", written))

    def unformatted(self, written: str, *, limit: int, size: Any) -> str:
        """`written` as plain text, for Telegram to take without parse mode: what it would
        have shown, with each link's address after its label, in order, as long as that
        stays within `limit` (as `size` counts, which adds up over the text): a link whose
        address would pass it keeps its label alone, not every link for that one's sake."""
        room = limit - size(self.visible(written))

        def spelled(match: re.Match[str]) -> str:
            nonlocal room
            href, label = html.unescape(match.group(1)), match.group(2)
            added = f" ({href})"
            if self.visible(label) == href or size(added) > room:
                return label
            room -= size(added)
            return label + added

        return self.visible(_TELEGRAM_LINK.sub(spelled, written))


def _same_place(label: str, href: str) -> bool:
    return label in (href, href.removeprefix("mailto:"))


TELEGRAM_HTML = TelegramHtml()


# A formatting character of Slack's or WhatsApp's formats only at a word's edge: after the
# start, a space or punctuation and before something not a space (or the mirror of that to
# close). Neither has an escape (Slack documents &, < and >; WhatsApp none), so a literal one
# at such an edge gets a zero-width space on that side, which joins it to what is beside it
# as a letter would; one inside a word (my_file_name) or between spaces (2 * 3) is left as
# it is, and so are addresses, which a person may copy or tap.
_ZERO_WIDTH = ZERO_WIDTH_SPACE  # which commands and cron expressions we read leave out
_MARKERS = frozenset("*_~`")
_ADDRESS = re.compile(r"\b(?:https?|mailto|ftp):\S+", re.IGNORECASE)


def _edge(char: str) -> bool:
    return not char or not (char.isalnum() or char == _ZERO_WIDTH)


def literal_markers(text: str) -> str:
    """`text` with its formatting characters shown as written on Slack and WhatsApp."""
    if not _MARKERS.intersection(text):
        return text
    out: list[str] = []
    at = 0
    for address in [*_ADDRESS.finditer(text), None]:
        end = address.start() if address else len(text)
        for i in range(at, end):
            char = text[i]
            if char not in _MARKERS:
                out.append(char)
                continue
            before, after = text[i - 1] if i else "", text[i + 1] if i + 1 < len(text) else ""
            if _edge(before) and after and not after.isspace() and out[-1:] != [_ZERO_WIDTH]:
                out.append(_ZERO_WIDTH)  # it could open
            out.append(char)
            if _edge(after) and before and not before.isspace():
                out.append(_ZERO_WIDTH)  # it could close
        if address:
            out.append(address.group())
            at = address.end()
    return "".join(out)


# Neither can escape a backtick inside inline code either, where it would end the code: it
# is written as a look-alike (the one sessions_app.quoting writes).
_TICK_IN_CODE = str.maketrans({"`": "ˋ"})


# A code block on Slack, WhatsApp and Discord ends at the next three backticks, wherever
# they are: no longer fence is read and nothing escapes them. Three in a block's code — a
# Markdown example's own fence — get a zero-width space after every second backtick of the
# run, so the code shows whole and as written.
_THIRD_TICK = re.compile(r"``(?=`)")


def fence_proof(code: str) -> str:
    """`code` with no three backticks together, as it reads."""
    return _THIRD_TICK.sub("``" + _ZERO_WIDTH, code)


def _slack_escaped(text: str) -> str:
    """Slack's three escapes (api.slack.com/reference/surfaces/formatting#escaping): so what
    the model wrote pings nobody (<!channel>) and links nothing."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


class _SingleMarkers(Style):
    """Slack's and WhatsApp's emphasis: one marker each side, on each line (neither carries
    it over a line break)."""

    def bold(self, inner: str) -> str:
        return wrapped_per_line("*", inner)

    def italic(self, inner: str) -> str:
        return wrapped_per_line("_", inner)

    def strike(self, inner: str) -> str:
        return wrapped_per_line("~", inner)


class SlackMrkdwn(_SingleMarkers):
    """Slack's mrkdwn: *bold*, _italic_, ~strike~, `code`, ``` blocks (no language),
    <url|label> links, > quotes; &, < and > escaped, and a literal *, _, ~ or ` kept from
    formatting (`literal_markers`)."""

    def text(self, text: str) -> str:
        return _slack_escaped(literal_markers(text))

    def code(self, code: str) -> str:
        return f"`{_slack_escaped(code.translate(_TICK_IN_CODE))}`"  # nothing formats in code

    def pre(self, code: str, language: str) -> str:
        return f"```\n{_slack_escaped(fence_proof(code))}\n```"

    def link(self, inner: str, href: str, label: str) -> str:
        if not linkable(href, label):
            return super().link(inner, href, label)  # the address in the open (channels_app.formatting.links)
        # A `|` or a space would end the address: percent-encoded, as markdown-it leaves others.
        address = _slack_escaped(href.replace("|", "%7C").replace(" ", "%20"))
        if label == href or not inner.strip():  # a bare address; a mail one keeps its label, not "mailto:"
            return f"<{address}>"
        return f"<{address}|{inner}>"

    def quote(self, inner: str, *, nested: bool) -> str:
        return "\n".join(f"&gt; {line}" if line else "&gt;" for line in inner.split("\n"))


SLACK_MRKDWN = SlackMrkdwn()

# A code block's closing fence line: what a quote or a list item puts before it, then the run.
_CLOSING_FENCE = re.compile(r"[ \t>]*(`{3,}|~{3,})[ \t]*")


# The language Discord's client reads after a code block's three backticks: one word of
# these, then the line's end; anything else there shows as the code's first line.
_DISCORD_LANGUAGE = re.compile(r"[A-Za-z0-9_+\-.#]+")


class DiscordMarkdown(AsWritten):
    """Discord renders the model's Markdown, but its client reads a code block only between
    three backticks, ended by the next three wherever they are: no longer fence, no ~~~,
    and a language only as one word. A code block fenced otherwise, or holding three
    backticks, is written with ``` (and its language, when it names one so) and its code
    `fence_proof`; the rest goes as written. Three backticks that nothing closes open no
    code block on Discord, which shows them and what follows as it shows text: so the reply
    is cut over parts as text there too (`read_as`)."""

    def markdown(self, markdown: str, env: dict[str, Any] | None = None) -> str:
        return Style.markdown(self, markdown, env)

    def read_as(self, markdown: str, tokens: list[Token]) -> str:
        lines = markdown.split("\n")
        unclosed = []
        for t in tokens:
            if t.type != "fence" or t.level != 0 or not t.map:
                continue
            first, end = t.map
            last = _CLOSING_FENCE.fullmatch(lines[end - 1]) if end - 1 > first else None
            if not (last and last.group(1)[0] == t.markup[0] and len(last.group(1)) >= len(t.markup)):
                unclosed.append(first)
        for first in unclosed:  # a zero-width space in its run: it opens nothing, and reads the same
            at = lines[first].index("```") if "```" in lines[first] else lines[first].index("~~~")
            lines[first] = lines[first][:at + 2] + _ZERO_WIDTH + lines[first][at + 2:]
        return "\n".join(lines) if unclosed else markdown

    def parsed(self, markdown: str, tokens: list[Token]) -> str:
        fences = [(t.markup, t.map, t.info) for t in tokens
                  if t.type == "fence" and t.map and (t.markup != "```" or "```" in t.content)]
        if not fences:
            return markdown.strip("\n")  # a part ends with its text, not the blank lines after it
        lines = markdown.split("\n")
        for markup, (first, end), info in fences:
            opening = lines[first]
            at = opening.index(markup)
            language = (info.split() or [""])[0]
            lines[first] = opening[:at] + "```" + (language if _DISCORD_LANGUAGE.fullmatch(language) else "")
            last = _CLOSING_FENCE.fullmatch(lines[end - 1]) if end - 1 > first else None
            if last and last.group(1)[0] == markup[0] and len(last.group(1)) >= len(markup):
                lines[end - 1] = lines[end - 1][:last.start(1)] + "```" + lines[end - 1][last.end(1):]
                end -= 1
            lines[first + 1:end] = [fence_proof(line) for line in lines[first + 1:end]]
        return "\n".join(lines).strip("\n")


DISCORD_MARKDOWN = DiscordMarkdown()


class WhatsApp(_SingleMarkers):
    """WhatsApp's formatting (faq.whatsapp.com, "how to format your messages"): *bold*,
    _italic_, ~strike~, `inline code`, ```monospace```, > quotes; links as "label (url)";
    a literal *, _, ~ or ` kept from formatting (`literal_markers`)."""

    def text(self, text: str) -> str:
        return literal_markers(text)

    def link(self, inner: str, href: str, label: str) -> str:
        if _same_place(label, href):
            return inner
        return f"{inner} ({href})" if inner.strip() else href

    def code(self, code: str) -> str:
        return f"`{code.translate(_TICK_IN_CODE)}`"

    def pre(self, code: str, language: str) -> str:
        # Its fences are on the code's lines: a backtick at either end would run into one.
        code = fence_proof(code)
        opening = _ZERO_WIDTH if code.startswith("`") else ""
        closing = _ZERO_WIDTH if code.endswith("`") else ""
        return f"```{opening}{code}{closing}```"


WHATSAPP = WhatsApp()
