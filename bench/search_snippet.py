"""What a found message's snippet costs when the message is huge: the line a search result
shows (the chat page's search, `qorven chat`'s /search, the `search_history` tool), for a
message of 1 MB — a pasted log, say, which the API takes — against the floor of finding
the word in it at all.

Usage: ``python bench/search_snippet.py [--quick]`` (normally through ``bench/run.py``).

Timed: ``sessions_app.search.hit_snippet`` over a message of LENGTH characters whose word
found is near its end (the snippet must look through it), p50 over CALLS calls after a
warm-up, for an English log and for a text of English and Chinese; the baseline, in the
same run over the same text, is ``text.lower().find(word)``: locating the word in C, with
no snippet made. No database.

Reported: ``ratio``, the snippet's time over the baseline's. Goal (reported, not
asserted): within 20 (a few passes over the text, none a Python step per character).

Progress goes to stderr; the last stdout line is the JSON result of bench/run.py's protocol.
"""
from __future__ import annotations

import json
from functools import partial

from _common import alternated_p50, in_process_args, log, met

LENGTH = 1_000_000
GOAL = 20.0
WORD = "deadline"
TEXTS = {
    "english_log": ("2026-12-06 21:44:03 INFO worker ready, queue depth 3, nothing due\n" * (LENGTH // 66 + 1))[:LENGTH],
    "english_chinese": ("The build passed 通过了所有测试 and shipped 已经发布 today. " * (LENGTH // 45 + 1))[:LENGTH],
}


def main() -> int:
    args = in_process_args(__doc__)
    from sessions_app.search import hit_snippet

    calls = 3 if args.quick else 9
    rows = []
    for name, body in TEXTS.items():
        text = body + f" the {WORD.title()} is Friday."
        p50 = alternated_p50({"snippet": partial(hit_snippet, text, [WORD], width=160),
                              "find": lambda text=text: text.lower().find(WORD)}, calls)
        shown = hit_snippet(text, [WORD], width=160)
        assert WORD.title() in shown, shown
        snippet, floor = p50["snippet"], p50["find"]
        row = {"text": name, "chars": len(text), "snippet_ms": round(snippet, 2), "find_ms": round(floor, 2),
               "ratio": round(snippet / floor, 1), "goal": met(snippet / floor <= GOAL)}
        log(json.dumps(row))
        rows.append(row)
    notes = [f"ratio: a search result's snippet of a {LENGTH:,}-character message, its word near the end, over "
             f"finding the word in it (lower() and find()), goal within {GOAL} (p50 of {calls} calls, alternated)"]
    for note in notes:
        log(note)
    print(json.dumps({"bench": "search_snippet", "rows": rows, "notes": notes}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
