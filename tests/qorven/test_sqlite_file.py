"""The embedded default's database file holds bot tokens, model keys and every
conversation: it is readable by its owner only, however the process's umask is set."""
from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
QORVEN = Path(sys.executable).with_name("qorven")


def migrate(database: Path) -> None:
    environment = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    done = subprocess.run(
        [str(QORVEN), "migrate", "--verbosity", "0"], cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**environment, "DJANGO_SECRET_KEY": "sqlite-file-test", "DATABASE_URL": f"sqlite:///{database}"},
        preexec_fn=lambda: os.umask(0o022),  # files readable by everyone unless we say otherwise
    )
    assert done.returncode == 0, done.stderr[-2000:]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_database_file_and_one_left_readable_are_made_the_owners_alone(tmp_path):
    database = tmp_path / "db.sqlite3"
    migrate(database)
    assert mode(database) == 0o600
    database.chmod(0o644)  # made before this rule, or copied in
    migrate(database)
    assert mode(database) == 0o600
    assert all(mode(p) & 0o077 == 0 for p in tmp_path.glob("db.sqlite3*"))
