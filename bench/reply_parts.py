"""Planning a long reply's parts: one paragraph of 20,000 characters against the same text
in short paragraphs.

Usage: ``python bench/reply_parts.py [--quick]`` (normally through ``bench/run.py``).

A paragraph longer than a part is cut inside its text (channels_app.formatting.seams:
each cut checks that both sides read as the text did); short paragraphs are packed whole
into parts and seldom cut. Both texts are the same sentences — words, **bold**, *italic*,
`code` and links — one joined by spaces, the other by a blank line every few sentences,
so what differs is only where the cuts fall. Timed per platform (Telegram, Slack,
WhatsApp, Discord, SMS with their limits and the way each counts), p50 over CALLS calls
after a warm-up, the two texts alternated so drift hits both alike; no database.

Reported: ``ratio``, the paragraph's time over the short paragraphs'. A paragraph cut
into parts is read for its spans and checked at each cut, which short paragraphs packed
whole never are, so it stays above 1 (most on Discord, whose short paragraphs are not even
written); while each cut read the whole paragraph again it was 3-22. Goal (reported, not
asserted): within 4 on Telegram, Slack, WhatsApp and SMS.

Progress goes to stderr; the last stdout line is the JSON result of bench/run.py's protocol.
"""
from __future__ import annotations

import json
import random
from functools import partial

from _common import alternated_p50, in_process_args, log, met

PLATFORMS = ("telegram", "slack", "whatsapp", "discord", "sms")
LENGTH = 20_000
SENTENCES_PER_PARAGRAPH = 3
GOAL = 4.0
_WORDS = ("the", "plan", "runs", "nightly", "and", "checks", "every", "backup", "before", "noon", "so", "nothing",
          "is", "lost", "when", "a", "disk", "fails", "we", "keep", "three", "copies", "of", "it")
_SPANS = ("**{}**", "*{}*", "`{}`", "[{}](https://docs.example.com/guide/backups?x=1&y=2)", "~~{}~~")


def sentences(length: int) -> list[str]:
    """Sentences of prose with formatted spans, about `length` characters in all."""
    rng = random.Random(7)
    out: list[str] = []
    total = 0
    while total < length:
        words = [rng.choice(_WORDS) for _ in range(rng.randint(8, 20))]
        # Spans over most of the text, so that most cuts fall inside one: one in each half.
        half = len(words) // 2
        for low, high in ((half, len(words)), (0, half)):
            width = min(rng.randint(4, 8), high - low)
            at = rng.randint(low, high - width)
            words[at:at + width] = [rng.choice(_SPANS).format(" ".join(words[at:at + width]))]
        sentence = " ".join(words).capitalize() + "."
        out.append(sentence)
        total += len(sentence) + 1
    return out


def texts(length: int) -> dict[str, str]:
    said = sentences(length)
    paragraphs = [" ".join(said[i:i + SENTENCES_PER_PARAGRAPH]) for i in range(0, len(said), SENTENCES_PER_PARAGRAPH)]
    return {"one_paragraph": " ".join(said), "short_paragraphs": "\n\n".join(paragraphs)}


def main() -> int:
    args = in_process_args(__doc__)
    from channels_app.adapters import adapter_for
    from channels_app.formatting import reply_parts

    calls = 3 if args.quick else 9
    bodies = texts(LENGTH)
    rows, notes = [], []
    for kind in PLATFORMS:
        adapter = adapter_for(kind)
        plan = partial(reply_parts, style=adapter.style, limit=adapter.limit, size=adapter.length, markdown=True)
        p50 = alternated_p50({name: partial(plan, body) for name, body in bodies.items()}, calls)
        parts = {name: len(plan(body)) for name, body in bodies.items()}
        one, short = p50["one_paragraph"], p50["short_paragraphs"]
        row = {"platform": kind, "chars": len(bodies["one_paragraph"]), "parts": parts["one_paragraph"],
               "one_paragraph_ms": round(one, 1), "short_paragraphs_ms": round(short, 1),
               "ratio": round(one / short, 2), "goal": "-" if kind == "discord" else met(one / short <= GOAL)}
        log(json.dumps(row))
        rows.append(row)
    notes.append(f"ratio: one paragraph of {LENGTH:,} characters over the same text in short paragraphs, goal "
                 f"within {GOAL} but on Discord (p50 of {calls} calls, alternated)")
    for note in notes:
        log(note)
    print(json.dumps({"bench": "reply_parts", "rows": rows, "notes": notes}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
