"""What a person reads when their message could not be answered: a small, fixed set of
notices of our own. Never the provider's or the platform's words — those can carry a key
fragment, an internal URL or another server's data; they go to the log and to the host's
admin (the message's `answer_error`, hidden from tenant admins). Owner surfaces (the web page and the terminal, where the
person reading runs the workspace) get a short detail: the HTTP status and the model.
Advice matches the cause: /retry only where trying again can help.
"""
from __future__ import annotations

from qorven.llm import ModelError

OWNER_SURFACES = frozenset({"web", "tui"})

# kind → (the notice's key in message metadata, the text)
_NOTICES: dict[str, tuple[str, str]] = {
    "unreachable": (
        "model_unavailable",
        "The model isn't answering right now. Your message is saved; send /retry to try again.",
    ),
    "rate_limited": (
        "rate_limited",
        "The model is rate limited right now. Your message is saved; send /retry in {seconds} s to try again.",
    ),
    "refused": (
        "model_refused",
        "The model refused to answer this message, so I've set it aside. Try rephrasing it.",
    ),
    "misconfigured": (
        "model_misconfigured",
        "I can't reach a working model: its settings need fixing by whoever runs this workspace.",
    ),
    "quota": (
        "model_quota",
        "The model provider's quota for this workspace is used up, so I can't answer until it is topped up.",
    ),
    "budget": (
        "budget",
        "This workspace has used its monthly model budget, so I can't answer until it resets or is raised.",
    ),
    "too_long": (
        "context_length",
        "This message doesn't fit the model's context, even in a fresh conversation. Please send it in "
        "shorter parts.",
    ),
    # The conversation could not be compacted to make room (manual mode): no fresh one was tried.
    "too_long_uncompacted": (
        "context_length",
        "This message doesn't fit the model's context alongside this conversation. Send /clear to start a "
        "fresh one, or send it in shorter parts.",
    ),
}
KINDS = frozenset(_NOTICES)

# Voice notes the Qor could not turn into text (no model call was made for them).
VOICE_NOTICES: dict[str, str] = {
    "voice_off": "I can't listen to voice notes yet. Could you write it down for me?",
    "voice_failed": "I couldn't make out that voice note. Could you send it again, or write it down?",
}


def notice_for(kind: str, *, channel: str, error: ModelError | None = None) -> tuple[str, str]:
    """(metadata key, text) of the notice for a failure of `kind` read on `channel`."""
    key, text = _NOTICES.get(kind, _NOTICES["unreachable"])
    seconds = round(error.retry_after) if error is not None and error.retry_after else 30
    text = text.format(seconds=max(seconds, 1))
    if error is not None and channel in OWNER_SURFACES:
        text = f"{text} ({error.summary()})"
    return key, text
