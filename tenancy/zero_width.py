"""Zero-width characters our formatting writes beside a literal *, _, ~ or backtick on
Slack and WhatsApp (channels_app.formatting.styles) so that it shows as written, and that a
person copying our text — a command, a cron line of /beats — sends back unseen. Where a
person's text is read as a command, its arguments or a cron expression they are left out;
what the person said is stored as it came."""
from __future__ import annotations

ZERO_WIDTH_SPACE = "\u200b"
# With it, its like that no command or schedule holds: the word joiner and the zero-width
# no-break space (a byte order mark). Not the joiners of emoji and scripts (U+200C, U+200D).
_UNSEEN = str.maketrans("", "", "\u200b\u2060\ufeff")


def zero_width_dropped(text: str) -> str:
    """`text` without the zero-width spaces a copy of ours may carry."""
    return text.translate(_UNSEEN)
