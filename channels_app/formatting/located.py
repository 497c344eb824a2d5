"""The CommonMark parser (with tables and strikethrough) whose inline rules note where in
a block's inline text the spans they make are: `meta["at"]` on each emphasis or
strikethrough marker, `meta["span"]` (start, end) on inline code, images, autolinks and
links, and `meta["label"]` (start, where the label ends, end) on links
(channels_app.formatting.layout reads them)."""
from __future__ import annotations

from collections.abc import Callable
from functools import cache

from markdown_it import MarkdownIt
from markdown_it.rules_inline import StateInline

Rule = Callable[[StateInline, bool], bool]


def _noting(rule: Rule, kind: str) -> Rule:
    def noted(state: StateInline, silent: bool) -> bool:
        if silent:
            return rule(state, silent)
        if state.pending:
            state.pushPending()
        start, count = state.pos, len(state.tokens)
        if not rule(state, silent):
            return False
        new = state.tokens[count:]
        if kind == "delimiters":  # one token a marker (or a pair of tildes), in order
            offset = start
            for token in new:
                token.meta["at"] = offset
                offset += len(token.content)
        elif new:
            new[0].meta["span"] = (start, state.pos)
            if kind == "link" and new[0].type == "link_open":
                end, state.pos = state.pos, start
                label = state.md.helpers.parseLinkLabel(state, start, True)
                state.pos = end
                new[0].meta["label"] = (start, label, end)
        return True

    return noted


@cache
def located() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False}).enable(["table", "strikethrough"])
    rules = {rule.name: rule.fn for rule in md.inline.ruler.__rules__}
    for name, kind in (("emphasis", "delimiters"), ("strikethrough", "delimiters"), ("link", "link"),
                       ("image", "span"), ("backticks", "span"), ("autolink", "span")):
        md.inline.ruler.at(name, _noting(rules[name], kind))
    return md
