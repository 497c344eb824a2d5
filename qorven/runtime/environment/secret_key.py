"""The embedded default's secret key, kept in a file of the project folder: made once,
then read by every process on this machine."""
from __future__ import annotations

import secrets
from pathlib import Path

import environ


def secret_key_kept(path: Path) -> str:
    """The key kept in `path`, made (owner-only) when the file is missing. A file there that
    cannot be used — empty, a folder, unreadable — is ImproperlyConfigured naming it: an
    empty key failed only at the first page signed, and a folder in a traceback."""
    if not path.exists():
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    what = ("put back the file your backup keeps, or remove it to have a new key made (everyone signed in "
            "is signed out), or set DJANGO_SECRET_KEY")
    try:
        key = path.read_text().strip()
    except OSError as exc:
        raise environ.ImproperlyConfigured(f"{path} holds the secret key but cannot be read "
                                           f"({exc.strerror or type(exc).__name__}): {what}") from None
    if not key:
        raise environ.ImproperlyConfigured(f"{path} holds the secret key but is empty: {what}")
    return key
