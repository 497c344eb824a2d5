"""The skill router: a learned skill with triggers answers a matching message itself.

A message that matches a trigger of exactly one skill the surface may use (its trust is at
least the skill's `min_trust`) is answered with the skill's reply — after running its
action, a tool with fixed arguments, when it has one, under the same gates as the model's
tool calls (the tenant's switches, the Qor's allowlist, the surface's trust) — with no
model call. Two skills matching, an action the surface may not run, or one that fails:
the model answers as usual. Triggers and templates are described in memory_app.skills.
"""
from __future__ import annotations

import json
import logging
import re
from dataclasses import dataclass
from datetime import datetime

import regex

from memory_app.models import LearnedSkill
from sessions_app.models import Message
from tenancy.tool_registry import Tool, ToolContext, registry
from tenancy.zones import person_zone

logger = logging.getLogger(__name__)
_SPACE = re.compile(r"\s+")
_END = ".!?…,;: "


@dataclass(frozen=True)
class Routed:
    skill: str
    text: str


def _plain(text: str) -> str:
    return _SPACE.sub(" ", text.strip().lower()).strip(_END)


# A trigger pattern is written by a tenant's admin and run on what anyone writes: one that
# backtracks (`(\w+\s?)+\?` on a long word that is not a question) would run for minutes.
# Matched with the `regex` module, which gives up after TRIGGER_SECONDS and lets other
# threads run meanwhile, and only on messages a trigger can mean (TRIGGER_TEXT_MAX).
TRIGGER_SECONDS = 0.05
TRIGGER_TEXT_MAX = 1000


def trigger_matches(trigger: str, text: str) -> bool:
    if len(trigger) > 2 and trigger.startswith("/") and trigger.endswith("/"):
        text = text.strip()
        if len(text) > TRIGGER_TEXT_MAX:
            return False
        try:
            return regex.fullmatch(trigger[1:-1], text, flags=regex.IGNORECASE, timeout=TRIGGER_SECONDS) is not None
        except TimeoutError:
            logger.warning("a skill trigger took too long to match and was skipped: %s", trigger[:80])
            return False
        except regex.error:
            return False  # saved before it was checked with this module: it matches nothing
    return _plain(trigger) == _plain(text)


def skill_route(*, skills: list[LearnedSkill], message: Message, ctx: ToolContext, offered: list[Tool]) -> Routed | None:
    """The router's answer to `message`, or None when the model is to answer it.
    `skills`: those the surface may use (memory_app.selectors.skills_for)."""
    if not message.content.strip():
        return None
    matched = [s for s in skills if s.triggers and any(trigger_matches(t, message.content) for t in s.triggers)]
    if len(matched) != 1:
        return None
    skill = matched[0]
    values: dict[str, object] = {
        "message": message.content.strip(), "name": message.sender_name,
        "time": datetime.now(person_zone(tenant=ctx.tenant, user_id=ctx.user.pk if ctx.user else None)).strftime("%A %Y-%m-%d %H:%M"),
    }
    if skill.action:
        if skill.action not in {t.name for t in offered}:
            return None
        answer = registry.execute(ctx, offered, skill.action, json.dumps(skill.action_args or {}))
        try:
            result = json.loads(answer)
        except json.JSONDecodeError:
            result = answer
        if isinstance(result, dict) and "error" in result:
            return None
        values["result"] = result
    try:
        text = skill.reply.format_map(values)
    except (KeyError, IndexError, ValueError, TypeError, AttributeError):
        return None  # a template asking for what the answer lacks: the model answers instead
    return Routed(skill.name, text) if text.strip() else None
