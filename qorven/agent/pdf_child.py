"""Run as a script, alone in a process of its own, by qorven.agent.pdf_text: reads a PDF
from standard input and writes what it holds as one JSON object on standard output —
{"reading": "text" | "no_text" | "locked" | "unreadable", "text": …, "cut": …, "error": …}.

Arguments: the pages to read at most, the characters to keep at most, the bytes of memory
and the seconds of CPU the process may use. It imports the standard library and pypdf
only (not Django), so it starts in a fraction of a second; the memory and CPU limits are
set before the document is looked at, so a compression bomb or a loop fails here, not in
the turn. An error is reported by its kind only: pypdf's messages can quote the document.
"""
from __future__ import annotations

import io
import json
import logging
import sys
from typing import Any


def _limit(memory: int, seconds: int) -> None:
    try:
        import resource
    except ImportError:  # not on this system: the parent's timeout still holds
        return
    for which, value in ((resource.RLIMIT_AS, memory), (resource.RLIMIT_CPU, seconds)):
        try:
            resource.setrlimit(which, (value, value))
        except (ValueError, OSError):
            pass


def read(data: bytes, *, pages: int, chars: int) -> dict[str, Any]:
    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(data))
    if reader.is_encrypted:
        try:
            opened = bool(reader.decrypt(""))  # locked only against printing or copying: readable
        except Exception:
            opened = False
        if not opened:
            return {"reading": "locked"}
    total = len(reader.pages)
    texts: list[str] = []
    kept = 0
    failed = ""
    cut = total > pages
    for number in range(min(total, pages)):
        if kept >= chars:  # enough: the pages left are not read
            cut = True
            break
        try:
            text = (reader.pages[number].extract_text() or "").strip()
        except Exception as exc:  # one bad page: the others are still read
            failed = failed or type(exc).__name__
            continue
        if text:
            texts.append(text)
            kept += len(text) + 2
    whole = "\n\n".join(texts)
    if not whole:
        return {"reading": "unreadable", "error": failed} if failed else {"reading": "no_text"}
    return {"reading": "text", "text": whole[:chars], "cut": cut or len(whole) > chars}


def main() -> None:
    pages, chars, memory, seconds = (int(a) for a in sys.argv[1:5])
    _limit(memory, seconds)
    logging.disable(logging.CRITICAL)  # pypdf's warnings can quote the document
    data = sys.stdin.buffer.read()
    try:
        answer = read(data, pages=pages, chars=chars)
    except Exception as exc:
        answer = {"reading": "unreadable", "error": type(exc).__name__}
    sys.stdout.write(json.dumps(answer))


if __name__ == "__main__":
    main()
