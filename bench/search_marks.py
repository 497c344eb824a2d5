"""What a run of combining marks costs search: a message of 100,000 characters written as
"Zalgo" text (thousands of marks in a row, of classes in turn) against one of plain
letters of the same length.

Usage: ``python bench/search_marks.py [--quick]`` (normally through ``bench/run.py``).

Composing text (NFC, NFKC) sorts each run of combining marks by class, one place at a time,
so a long run of marks of alternating classes cost the square of its length: a message the
API takes held its append for seconds on SQLite and for half a minute on PostgreSQL. Search
reads such a run 30 marks at a time (sessions_app.fulltext.composed, Unicode's stream-safe
format). Timed here: the text SQLite's index and the memories' search text are given
(`search_text`) and the folding of a query's words (`fold`), each kind of text alternated
with the plain one, p50 over CALLS calls after a warm-up; no database.

Reported: ``ratio``, the marks' time over the plain letters'. Goal (reported, not
asserted): within 10 (a mark costs more than a letter, but no run costs its square).

Progress goes to stderr; the last stdout line is the JSON result of bench/run.py's protocol.
"""
from __future__ import annotations

import json
from functools import partial

from _common import alternated_p50, in_process_args, log, met

LENGTH = 100_000
GOAL = 10.0
TEXTS = {  # marks of classes 230 and 220 in turn; Thai tone and vowel marks (107, 103) in turn
    "latin_marks": "a" + "\u0301\u0316" * (LENGTH // 2),
    "thai_marks": "ก" + "\u0e48\u0e38" * (LENGTH // 2),
}
PLAIN = ("pineapple " * (LENGTH // 10 + 1))[:LENGTH + 1]


def main() -> int:
    args = in_process_args(__doc__)
    from sessions_app.fulltext import fold, search_text

    calls = 3 if args.quick else 9
    rows = []
    for step, function in (("search_text", search_text), ("fold", fold)):
        for name, marks in TEXTS.items():
            p50 = alternated_p50({"marks": partial(function, marks), "plain": partial(function, PLAIN)}, calls)
            marked, plain = p50["marks"], p50["plain"]
            row = {"step": step, "text": name, "chars": len(marks), "marks_ms": round(marked, 2),
                   "plain_ms": round(plain, 2), "ratio": round(marked / plain, 2), "goal": met(marked / plain <= GOAL)}
            log(json.dumps(row))
            rows.append(row)
    notes = [f"ratio: {LENGTH:,} characters of combining marks in a row over as many plain letters, goal within "
             f"{GOAL} (p50 of {calls} calls, alternated)"]
    for note in notes:
        log(note)
    print(json.dumps({"bench": "search_marks", "rows": rows, "notes": notes}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
