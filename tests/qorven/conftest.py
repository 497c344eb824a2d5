"""Fixtures of the tests of `qorven` itself."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from .failover_support import route_servers  # noqa: F401 (a fixture of the failover tests)
from .test_client_address import ROOT, _clean_env


@pytest.fixture(scope="session")
def migrated_sqlite(tmp_path_factory) -> Path:
    """An SQLite file with every migration applied and nothing else, made once per test
    process: each `Server` starts on a copy of its own. Migrating a fresh file took each
    server 5 to 6 s of CPU (8 to 15 s on a loaded machine); on the copy, the migrate its
    start still runs finds nothing to apply."""
    database = tmp_path_factory.mktemp("migrated") / "template.sqlite3"
    subprocess.run([str(Path(sys.executable).with_name("qorven")), "migrate", "--verbosity", "0"], cwd=ROOT,
                   env={**_clean_env(), "QORVEN_ENV_FILE": "", "DATABASE_URL": f"sqlite:///{database}",
                        "DJANGO_SECRET_KEY": "client-address-test"}, check=True, capture_output=True, timeout=180)
    return database
