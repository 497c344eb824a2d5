"""Where a Discord /ask is answered, as its reply target names it: the interaction's token
(a follow-up, for 15 minutes), the chat it was asked in, who asked, what kind of chat that
is and the start of the question — so an answer later than the token can still be placed
(channels_app.adapters.discord)."""
from __future__ import annotations

from dataclasses import dataclass

from sessions_app.quoting import inert

FOLLOWUP = "followup:"
SEP = "\x1f"  # between the interaction and what places a late answer, as in an email's target
QUOTED = 100  # characters of the question a late answer quotes

# Where an /ask was asked, as a late answer says it: the bot posts only in the first two
# (and only where it was added to the server); a group DM or a DM between people it is no
# member of.
SERVER, DM, GROUP, PRIVATE = "server", "dm", "group", "private"
_WHERE = {SERVER: "a server channel", GROUP: "a group chat", PRIVATE: "a direct message with someone else"}


@dataclass(frozen=True)
class Ask:
    channel: str  # the chat it was asked in ("" in a target stored before chats were named)
    token: str  # the interaction's token
    asker: str = ""  # who asked ("" in a target stored before askers were named)
    place: str = ""  # SERVER, DM, GROUP or PRIVATE

    @property
    def bot_chat(self) -> bool:
        """Whether the bot can be a member of the chat it was asked in (not so in a group
        DM or a DM between people)."""
        return self.place not in (GROUP, PRIVATE)
    question: str = ""  # its start, on one line


def ask_target(*, channel: str, token: str, asker: str, place: str, question: str) -> str:
    """The reply target of an /ask: `followup:<channel>:<token>`, then what places a late answer."""
    line = " ".join(question.replace(SEP, " ").split())
    quoted = line if len(line) <= QUOTED else line[:QUOTED - 1].rstrip() + "…"
    return f"{FOLLOWUP}{channel}:{token}" + SEP.join(["", asker, place, quoted])


def ask_of(target: str) -> Ask:
    """The /ask a follow-up target names. Older targets read too: `followup:<channel>:<token>`
    and `followup:<token>` (no chat, no asker: a late answer is posted as it was then)."""
    head, *extra = target[len(FOLLOWUP):].split(SEP)
    channel, sep, token = head.partition(":")
    if not (sep and channel.isdigit()):
        channel, token = "", head
    asker, place, question = (extra + ["", "", ""])[:3]
    return Ask(channel=channel, token=token, asker=asker, place=place, question=question)


def late_header(ask: Ask, *, in_dm: bool) -> str:
    """The line a late answer begins with, saying which /ask it answers: in the chat it was
    asked in, naming the asker (everyone there reads it); in the asker's DM with the bot
    (it could not be posted where it was asked), saying where that was. "" in the asker's
    own DM with the bot, where the answer needs no introduction. The question is quoted
    inert (sessions_app.quoting): what the asker wrote formats nothing of ours."""
    if not ask.asker or ask.place not in _WHERE:
        return ""
    question = inert(ask.question)
    if in_dm:
        return (f"Your /ask “{question}” in {_WHERE[ask.place]} was answered after Discord stopped "
                "waiting for it, and could not be posted there:")
    return f"<@{ask.asker}> answering your /ask “{question}”:"
