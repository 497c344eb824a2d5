"""The Makefile's targets as a newcomer meets them: what `make run` says before its steps."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_run_on_a_fresh_clone_says_what_it_installs_before_the_silent_pip_install(tmp_path):
    """pip runs --quiet: on a fresh clone `make run` printed nothing for the minute or more
    the install takes, as if it hung."""
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    planned = subprocess.run(["make", "-n", "run"], cwd=tmp_path, capture_output=True, text=True,
                             timeout=60, check=True).stdout.splitlines()
    install = next(i for i, line in enumerate(planned) if "pip install --quiet -e ." in line)
    said = [line for line in planned[:install] if line.startswith("echo")]
    assert said and "Installing Qorven" in said[-1] and "a minute or two" in said[-1], planned
