"""The type checks STYLE.md asks for, on the modules `[tool.mypy]` in pyproject.toml names
(the agent, the model layer, services, selectors, adapters), with Django's stubs: run by
the suite so a wrong type fails the build as a wrong import does (tests/test_architecture.py)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.runs_long
def test_the_checked_modules_type_check():
    # mypy's own cache (.mypy_cache, as `make lint` keeps it): what did not change since the
    # last run, mostly the libraries' types (openai alone is 2,000 modules), is not read
    # again. A fresh clone's first run reads everything, about 17 s of CPU.
    env = {**os.environ, "DJANGO_SECRET_KEY": os.environ.get("DJANGO_SECRET_KEY") or "types-only"}
    result = subprocess.run(
        [sys.executable, "-m", "mypy"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=240,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success: no issues found" in result.stdout
