"""A relative path in the settings names the same file whichever folder a process starts
in: it is taken from the project root (where `.env` and the defaults are), as
QORVEN_BACKUP_DIR always was. QORVEN_HEARTBEATS_FILE and QORVEN_SKILLS_DIR were taken from
the current folder, so `qorven serve` started by a service manager from / read another
file than `make run` did."""
from __future__ import annotations

import json
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
