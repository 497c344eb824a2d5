"""The summarizer sub-agent: condense a run of messages before it leaves the prompt.

Two steps, both on the Qor's `summarizer` model route:

1. the **memory flush** extracts the facts, reminders and open tasks of the run into
   memories, as JSON validated against a strict schema (one repair attempt; a flush that
   still fails raises CompactionFailed, so nothing is compacted and nothing is lost); a
   reminder or open task may carry a due time, read like the `remember` tool's (a due
   time that cannot be read, or has already passed, leaves it undated: never a failure).
   It is shown the person's notes already kept that look related (numbered, dated), and
   an item may say which of them it replaces or that one already says it, and the time of
   the line it comes from (its date);
2. the **summary** gives a digest of the run (stored as a `conversation_digest` memory
   with its date range and channels) and the updated running note the prompt carries.

With the offline provider (no model configured) both are plain extracts, no model call.
This package only reads and computes; memory_app.compaction stores the results (the
flushed notes through memory_app.flushed_notes, as `remember` stores a note).

- `excerpts`: which messages one run takes (what leaves the window), and how they read;
- `known_notes`: the person's notes the flush is shown, and the time each note was said;
- `model_answers`: what the summarizer route is asked, and its answers, checked;
- `condense`: the two steps over one excerpt, with the model or without one.
"""
