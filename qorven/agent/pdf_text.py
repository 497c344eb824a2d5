"""A PDF's text for the model, read once — by the turn that first shows the PDF to the
model, never by the request or webhook that stored it — and kept with the attachment
(Image.text, Image.reading), so no later prompt reads it again.

The PDF is read by pypdf in a child process (qorven/agent/pdf_child.py) with a timeout
(QORVEN_PDF_SECONDS), a memory and a CPU limit, at most QORVEN_PDF_PAGES pages and
TEXT_CHARS characters. A PDF is whatever anyone sent: encrypted, malformed, a page tree of
millions of pages, a compression bomb. pypdf is pure Python, so a thread reading one could
be neither stopped nor kept from holding the interpreter; a process can be killed, and
whatever it does, the turn goes on with the PDF's note.
"""
from __future__ import annotations

import json
import logging
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from qorven.runtime.storable_text import storable
from sessions_app.models import Image

logger = logging.getLogger(__name__)

CHILD = Path(__file__).with_name("pdf_child.py")
# Kept of a PDF's text, whatever QORVEN_PROMPT_FILE_CHARS is now (a prompt reads less).
TEXT_CHARS = 100_000
MEMORY = 768 * 1024 * 1024  # bytes the reading process may map: a bomb fails there
TRUNCATED = "[… truncated]"


@dataclass(frozen=True)
class PdfReading:
    reading: str  # an Image.Reading
    text: str = ""


UNREADABLE = PdfReading(Image.Reading.UNREADABLE)


def pdf_read(data: bytes) -> PdfReading:
    """The text of the PDF `data`, at most TEXT_CHARS characters (one cut short ends with
    TRUNCATED), or why there is none. Never raises; a failure is logged by its kind, never
    with the document's text."""
    seconds = settings.QORVEN_PDF_SECONDS
    command = [sys.executable, "-I", str(CHILD), str(settings.QORVEN_PDF_PAGES), str(TEXT_CHARS), str(MEMORY),
               str(int(seconds) + 1)]
    try:
        done = subprocess.run(command, input=data, capture_output=True, timeout=seconds, check=False)
    except subprocess.TimeoutExpired:
        logger.warning("a PDF was still being read after %s s; the model gets its note", seconds)
        return UNREADABLE
    except OSError as exc:
        logger.warning("the PDF reader could not be started: %s", type(exc).__name__)
        return UNREADABLE
    try:
        answer = json.loads(done.stdout)
        reading = Image.Reading(answer["reading"])
    except (ValueError, KeyError, TypeError):
        # Killed by its memory or CPU limit, most likely: the document is not logged.
        logger.warning("the PDF reader ended without an answer (exit status %s)", done.returncode)
        return UNREADABLE
    if reading != Image.Reading.TEXT:
        if answer.get("error"):
            logger.info("a PDF could not be read: %s", str(answer["error"])[:100])
        return PdfReading(reading)
    # As every store takes it: no NUL, no lone surrogate (a broken font's mapping).
    text = storable(str(answer.get("text", ""))).encode("utf-8", "replace").decode("utf-8")
    return PdfReading(reading, f"{text}\n{TRUNCATED}" if answer.get("cut") else text)
