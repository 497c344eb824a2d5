"""The embedded default's `.secret-key` file, made once and read by every process: one
that is there but cannot be used is a configuration error naming it (which `qorven`
prints as one line: tests/qorven/test_cli.py), never a traceback or an empty key."""
from __future__ import annotations

import environ
import pytest

from qorven.runtime.environment import secret_key_kept


def test_a_missing_key_file_is_made_owner_only_and_then_read_as_it_is(tmp_path):
    kept = tmp_path / ".secret-key"
    key = secret_key_kept(kept)
    assert len(key) >= 50 and kept.stat().st_mode & 0o777 == 0o600
    assert secret_key_kept(kept) == key


@pytest.mark.parametrize("spoilt", ["empty", "folder"])
def test_a_key_file_that_cannot_be_used_is_a_configuration_error_naming_it(tmp_path, spoilt):
    """An empty file gave an empty key, which Django refuses only at the first page signed
    (every sign-in a 500) and doctor never named; a folder in its place ended every command
    in IsADirectoryError's traceback."""
    kept = tmp_path / ".secret-key"
    if spoilt == "empty":
        kept.write_text("\n")
    else:
        kept.mkdir()
    with pytest.raises(environ.ImproperlyConfigured) as refused:
        secret_key_kept(kept)
    said = str(refused.value)
    assert said.startswith(f"{kept} ") and "DJANGO_SECRET_KEY" in said and "remove it" in said, said
