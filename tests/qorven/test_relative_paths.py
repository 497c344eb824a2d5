"""A relative path in the settings names the same file whichever folder a process starts
in: it is taken from the project root (where `.env` and the defaults are), as
QORVEN_BACKUP_DIR always was. QORVEN_HEARTBEATS_FILE and QORVEN_SKILLS_DIR were taken from
the current folder, so `qorven serve` started by a service manager from / read another
file than `make run` did."""
from __future__ import annotations

import json
import sqlite3
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRINT_PATHS = (
    "import json, django; django.setup(); from django.conf import settings; "
    "print(json.dumps({name: str(getattr(settings, name)) for name in "
    "('QORVEN_HEARTBEATS_FILE', 'QORVEN_SKILLS_DIR', 'QORVEN_BACKUP_DIR')}))"
)


def test_relative_paths_are_taken_from_the_project_root_wherever_the_process_starts(tmp_path):
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "qorven.settings", "PYTHONPATH": str(ROOT),
           "QORVEN_HEARTBEATS_FILE": "config/beats.json", "QORVEN_SKILLS_DIR": "config/skills",
           "QORVEN_BACKUP_DIR": "config/backups"}
    done = subprocess.run([sys.executable, "-c", PRINT_PATHS], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == {
        "QORVEN_HEARTBEATS_FILE": str(ROOT / "config" / "beats.json"),
        "QORVEN_SKILLS_DIR": str(ROOT / "config" / "skills"),
        "QORVEN_BACKUP_DIR": str(ROOT / "config" / "backups"),
    }


QORVEN = Path(sys.executable).with_name("qorven")


def qorven(*args: str, cwd: Path, **settings: str) -> subprocess.CompletedProcess:
    """`qorven` started in `cwd`, as a service manager or cron starts it, with these settings."""
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update({"DJANGO_SECRET_KEY": "paths", "QORVEN_ENV_FILE": "", **settings})  # no developer's .env
    return subprocess.run([str(QORVEN), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)


def test_a_relative_sqlite_database_url_opens_the_same_file_wherever_the_process_starts(tmp_path):
    """`sqlite:///data/db.sqlite3` was taken from the current folder: `qorven serve` started
    from / (a service manager, cron) opened, and made, another, empty database."""
    (tmp_path / "data").mkdir()
    with sqlite3.connect(tmp_path / "data" / "db.sqlite3") as db:
        db.execute("CREATE TABLE kept_here (id integer primary key)")
    (elsewhere := tmp_path / "elsewhere" / "deeper").mkdir(parents=True)
    relative = os.path.relpath(tmp_path / "data" / "db.sqlite3", ROOT)
    done = qorven("inspectdb", "kept_here", cwd=elsewhere, DATABASE_URL=f"sqlite:///{relative}")
    assert done.returncode == 0, done.stderr[-800:]
    assert "class KeptHere(models.Model):" in done.stdout
    assert list(elsewhere.iterdir()) == [] and not (tmp_path / "elsewhere" / "data").exists()


def test_a_sqlite_file_in_a_folder_that_does_not_exist_is_one_line_naming_where_it_was_looked_for(tmp_path):
    """SQLite cannot make the folder: every command that opened the database ended in a
    traceback, "unable to open database file", naming no file."""
    relative = os.path.relpath(tmp_path / "missing" / "db.sqlite3", ROOT)
    done = qorven("migrate", cwd=tmp_path, DATABASE_URL=f"sqlite:///{relative}")
    assert done.returncode == 2, done.stderr[-800:]
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("qorven: configuration error: DATABASE_URL ") and str(tmp_path / "missing") in line, line
    assert "project root" in line and not (tmp_path / "missing").exists()


def test_a_relative_settings_file_is_read_from_the_project_root_wherever_the_process_starts(tmp_path):
    """QORVEN_ENV_FILE=conf/qorven.env was taken from the current folder: started from
    anywhere else, every command stopped on a missing file, or read another one."""
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "qorven.env").write_text("QORVEN_TURN_LEASE=45\n")
    (elsewhere := tmp_path / "elsewhere").mkdir()
    relative = os.path.relpath(tmp_path / "conf" / "qorven.env", ROOT)
    done = qorven("diffsettings", cwd=elsewhere, QORVEN_ENV_FILE=relative)
    assert done.returncode == 0, done.stderr[-800:]
    assert "QORVEN_TURN_LEASE = 45" in done.stdout

    missing = qorven("check", cwd=elsewhere, QORVEN_ENV_FILE="conf/typo.env")
    assert missing.returncode == 2
    (line,) = missing.stderr.strip().splitlines()
    assert "'conf/typo.env'" in line and str(ROOT / "conf" / "typo.env") in line and "project root" in line, line
