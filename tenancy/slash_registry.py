"""The slash-command registry: commands answered without a model call.

Each app declares its commands in its own `slash_commands.py` with `@slash_command`; the
modules are discovered at startup (see tenancy.apps) and the agent only reads the registry.

A command message is stored like any other user message (nothing is lost) but tagged
`metadata.command`, so the agent never treats it as a question; its answer is an
assistant message tagged as a notice, shown to the person and left out of prompts.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from typing import TYPE_CHECKING

from .zero_width import zero_width_dropped

if TYPE_CHECKING:  # the store sits above tenancy: a type, never an import
    from sessions_app.models import Session


@dataclass(frozen=True)
class CommandReply:
    """A command's answer when it belongs somewhere else than the session the command
    came in on: after `/clear` rotates, the answer opens the fresh session."""

    text: str
    session: "Session"


CommandHandler = Callable[["CommandContext"], "str | CommandReply"]


@dataclass(frozen=True)
class CommandContext:
    session: "Session"
    channel: str
    args: str
    trust: str
    sender_id: str = ""  # the platform account that sent it ("" on the web and the terminal)


@dataclass(frozen=True)
class Command:
    name: str
    summary: str
    handler: CommandHandler
    aliases: tuple[str, ...] = ()


class SlashRegistry:
    """Commands by name and alias."""

    def __init__(self) -> None:
        self._by_name: dict[str, Command] = {}

    def register(self, entry: Command) -> Command:
        for key in (entry.name, *entry.aliases):
            self._by_name[key] = entry
        return entry

    def listed(self) -> list[Command]:
        """Every command once, by name."""
        return sorted({c.name: c for c in self._by_name.values()}.values(), key=lambda c: c.name)

    def parse(self, content: str) -> tuple[Command, str] | None:
        """The command a message invokes, with its argument text, or None for a normal message.
        Zero-width spaces copied from our formatting are not read (tenancy.zero_width)."""
        text = zero_width_dropped(content).strip()
        if not text.startswith("/") or len(text) < 2:
            return None
        head, _, args = text[1:].partition(" ")
        name = head.split("@", 1)[0].lower()  # Telegram appends @botname in groups
        entry = self._by_name.get(name)
        return (entry, args.strip()) if entry is not None else None


slash_registry = SlashRegistry()


def slash_command(name: str, summary: str, *,
                  aliases: tuple[str, ...] = ()) -> Callable[[CommandHandler], CommandHandler]:
    """Decorator: register the function as the handler of `/name` (and its aliases)."""

    def wrap(handler: CommandHandler) -> CommandHandler:
        slash_registry.register(Command(name, summary, handler, aliases))
        return handler

    return wrap


def command_parse(content: str) -> tuple[Command, str] | None:
    """The command a message invokes, with its argument text, or None for a normal message."""
    return slash_registry.parse(content)
