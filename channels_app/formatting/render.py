"""The model's Markdown — CommonMark with GitHub's tables and strikethrough — parsed by
markdown-it-py and written the way a platform shows formatting: one walk over the parsed
tree, a `Style` saying how each kind of thing is written (channels_app.formatting.styles).

Raw HTML in the Markdown is text (a model's "<br>" is shown as written, never passed on as
markup). What no platform shows as such is written in a readable plain form: a heading as
a bold line, list items as "• item" / "1. item", a table as rows of cells between " | ",
an image as a link to it labelled with its description.
"""
from __future__ import annotations

from functools import cache
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.token import Token
from markdown_it.tree import SyntaxTreeNode

INDENT = "   "  # a nested list's, per level


@cache
def parser() -> MarkdownIt:
    """One parser for the process: markdown-it keeps no state between parses."""
    return MarkdownIt("commonmark", {"html": False}).enable(["table", "strikethrough"])


def references(markdown: str) -> dict[str, Any]:
    """The link reference definitions of `markdown` (`[docs]: https://…`), for a part of it
    split from the definition to still link `[the docs][docs]`."""
    env: dict[str, Any] = {}
    parser().parse(markdown, env)
    return env


class Style:
    """How a platform writes each kind of thing; this one is plain text (what SMS shows).
    Inline methods take their content already written (`inner`), `text` the source's
    literal text; each returns what the platform is sent."""

    bullet = "•"

    def text(self, text: str) -> str:
        return text

    def bold(self, inner: str) -> str:
        return inner

    def italic(self, inner: str) -> str:
        return inner

    def strike(self, inner: str) -> str:
        return inner

    def code(self, code: str) -> str:
        return self.text(code)

    def pre(self, code: str, language: str) -> str:
        return self.text(code)

    def link(self, inner: str, href: str, label: str) -> str:
        """`inner`, the label as written; `label`, its plain text (the URL itself for a bare link)."""
        if _same_place(label, href):
            return inner
        return f"{inner} ({self.text(href)})" if inner.strip() else self.text(href)

    def heading(self, inner: str) -> str:
        return self.bold(inner)

    def quote(self, inner: str, *, nested: bool) -> str:
        return "\n".join(f"> {line}" if line else ">" for line in inner.split("\n"))

    def rule(self) -> str:
        return "———"

    # --- the text a platform counts and shows ---
    def visible(self, written: str) -> str:
        """What the platform shows of `written` (what its limit counts)."""
        return written

    def markdown(self, markdown: str, env: dict[str, Any] | None = None) -> str:
        """`markdown` (the model's) written for the platform; `env`, the whole reply's link
        references (`references`) when this is a part of it."""
        return self.parsed(markdown, parser().parse(markdown, dict(env or {})))

    def read_as(self, markdown: str, tokens: list[Token]) -> str:
        """The model's Markdown as the platform reads what it is sent, where that differs
        from Markdown's reading in what is cut apart (Discord: ``` that nothing closes opens
        no code block); the reply is cut over parts as this reads. As written, by default."""
        return markdown

    def parsed(self, markdown: str, tokens: list[Token]) -> str:
        """`markdown` written for the platform from its `tokens`, parsed already."""
        return _Walk(self).blocks(SyntaxTreeNode(tokens).children).strip("\n")

    def plain(self, text: str) -> str:
        """Text of ours (a notice, a command's answer quoting what people wrote) written so
        the platform shows it as it is, formatting nothing."""
        return self.text(text)


def _same_place(label: str, href: str) -> bool:
    """Whether a link's label is its address (an autolink, a bare e-mail address)."""
    return label in (href, href.removeprefix("mailto:"))


def wrapped_per_line(marker: str, inner: str) -> str:
    """`inner` between `marker`s line by line: platforms whose markers are characters
    (Slack, WhatsApp) format nothing across a line break."""
    return "\n".join(f"{marker}{line}{marker}" if line.strip() else line for line in inner.split("\n"))


class _Walk:
    """One rendering: the tree's blocks and spans written in `style`."""

    def __init__(self, style: Style) -> None:
        self.style = style
        self.quotes = 0  # blockquotes we are in
        self.lists = 0  # lists we are in
        # The emphasis the text is in already ("strong" in a heading, a table's header): one
        # span of it inside is written as its text. Slack's and WhatsApp's markers do not nest —
        # "*" opened inside "*" closes it, and the stars show — and elsewhere it changes nothing.
        self.emphasis: set[str] = set()

    def blocks(self, nodes: list[SyntaxTreeNode], sep: str = "\n\n") -> str:
        return sep.join(part for part in (self.block(node) for node in nodes) if part)

    def block(self, node: SyntaxTreeNode) -> str:
        style, kind = self.style, node.type
        if kind == "paragraph":
            return self.inline(node)
        if kind == "heading":
            return style.heading(self.within("strong", node))
        if kind in ("fence", "code_block"):
            language = node.info.split()[0] if kind == "fence" and node.info.strip() else ""
            return style.pre(node.content.removesuffix("\n"), language)
        if kind == "blockquote":
            self.quotes += 1
            inner = self.blocks(node.children)
            self.quotes -= 1
            return style.quote(inner, nested=self.quotes > 0) if inner else ""
        if kind in ("bullet_list", "ordered_list"):
            return self.listing(node)
        if kind == "table":
            return self.table(node)
        if kind == "hr":
            return style.rule()
        return style.text(node.content.removesuffix("\n"))  # html_block: never made with html off

    def listing(self, node: SyntaxTreeNode) -> str:
        ordered = node.type == "ordered_list"
        start = int(str(node.attrs.get("start", 1))) if ordered else 1
        indent = INDENT * self.lists
        items = []
        self.lists += 1
        for n, item in enumerate(node.children):
            marker = f"{start + n}." if ordered else self.style.bullet
            body = self.blocks(item.children, sep="\n")
            items.append(f"{indent}{marker} {body.lstrip(' ')}")
        self.lists -= 1
        return "\n".join(items)

    def table(self, node: SyntaxTreeNode) -> str:
        rows = []
        for section in node.children:  # thead, tbody
            for row in section.children:
                if section.type == "thead":
                    line = " | ".join(self.within("strong", cell) for cell in row.children)
                    rows.append(self.style.bold(line) if line.strip() else line)
                else:
                    rows.append(" | ".join(self.inline(cell) for cell in row.children))
        return "\n".join(rows)

    def inline(self, node: SyntaxTreeNode) -> str:
        """A block's spans (its one inline child's), or a span's children."""
        if node.type != "inline" and node.children and node.children[0].type == "inline":
            node = node.children[0]
        return "".join(self.span(child) for child in node.children)

    def within(self, emphasis: str, node: SyntaxTreeNode) -> str:
        """`node`'s spans written in `emphasis` (which the caller writes around them)."""
        added = emphasis not in self.emphasis
        self.emphasis.add(emphasis)
        try:
            return self.inline(node)
        finally:
            if added:
                self.emphasis.discard(emphasis)

    def span(self, node: SyntaxTreeNode) -> str:
        style, kind = self.style, node.type
        if kind in ("softbreak", "hardbreak"):
            return "\n"
        if kind in ("strong", "em", "s"):
            if kind in self.emphasis:
                return self.inline(node)
            inner = self.within(kind, node)
            if not inner.strip():
                return inner
            return {"strong": style.bold, "em": style.italic, "s": style.strike}[kind](inner)
        if kind == "code_inline":
            return style.code(node.content)
        if kind == "link":
            return style.link(self.inline(node), str(node.attrs.get("href", "")), _plain(node))
        if kind == "image":
            alt = _plain(node)
            src = str(node.attrs.get("src", ""))
            return style.link(style.text(alt), src, alt) if alt.strip() else style.link(style.text(src), src, src)
        return style.text(node.content)  # text, html_inline (as text: html is off)


def _plain(node: SyntaxTreeNode) -> str:
    """The text under `node`, its formatting left out (a link's label, an image's description)."""
    if node.type in ("text", "code_inline", "html_inline"):
        return node.content
    if node.type in ("softbreak", "hardbreak"):
        return " "
    return "".join(_plain(child) for child in node.children)
