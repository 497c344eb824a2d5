"""PDFs built for tests with pypdf: text on pages, blank pages, passwords."""
from __future__ import annotations

import io

from pypdf import PdfWriter
from pypdf.generic import DecodedStreamObject, DictionaryObject, NameObject


def pdf(*pages: str, user_password: str | None = None, owner_password: str = "owner") -> bytes:
    """A PDF with one page per text (an empty text: a page with nothing written on it),
    encrypted (AES-256) when `user_password` is given ("" opens it without one)."""
    writer = PdfWriter()
    font = writer._add_object(DictionaryObject({
        NameObject("/Type"): NameObject("/Font"), NameObject("/Subtype"): NameObject("/Type1"),
        NameObject("/BaseFont"): NameObject("/Helvetica")}))
    for text in pages:
        page = writer.add_blank_page(612, 792)
        if not text:
            continue
        page[NameObject("/Resources")] = DictionaryObject({
            NameObject("/Font"): DictionaryObject({NameObject("/F1"): font})})
        stream = DecodedStreamObject()
        stream.set_data(b"BT /F1 12 Tf 72 720 Td (" + text.encode("latin-1") + b") Tj ET")
        page[NameObject("/Contents")] = writer._add_object(stream)
    if user_password is not None:
        writer.encrypt(user_password=user_password, owner_password=owner_password, algorithm="AES-256")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()
