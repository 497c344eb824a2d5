"""The README's configuration table and the settings agree: every variable the settings
read is documented there, and every variable documented there is read by the code."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CODE = ["qorven", "channels_app", "sessions_app", "memory_app", "heartbeats_app", "tenancy", "legacy_app"]


def _table() -> set[str]:
    """The names in the first cell of the table's rows (a row may name two: `A` / `B`)."""
    cells = re.findall(r"^\| (`[A-Z][A-Z_0-9]+`[^|]*) \|", (ROOT / "README.md").read_text(encoding="utf-8"), re.M)
    return {name for cell in cells for name in re.findall(r"`([A-Z][A-Z_0-9]+)`", cell)}


def test_every_variable_the_settings_read_is_in_the_readmes_table():
    read = set(re.findall(r'env\.\w+\(\s*"([A-Z][A-Z_0-9]+)"', (ROOT / "qorven" / "settings.py").read_text()))
    read |= set(re.findall(r'self\.\w+\(\s*"([A-Z][A-Z_0-9]+)"',
                           (ROOT / "qorven" / "runtime" / "environment.py").read_text()))
    assert len(read) > 50  # the patterns still find them
    assert sorted(read - _table()) == []


def test_every_variable_in_the_readmes_table_is_read_by_the_code():
    names = set()
    for package in CODE:
        for path in (ROOT / package).rglob("*.py"):
            names |= set(re.findall(r'"([A-Z][A-Z_0-9]+)"', path.read_text(encoding="utf-8")))
    assert sorted(_table() - names) == []
