"""tests/denied_dirs.py: a directory out of reach for one block, in its thread alone."""
from __future__ import annotations

import os
import stat
import threading

import pytest

from .denied_dirs import denied


def test_a_directory_made_unreadable_for_a_block_is_so_for_its_thread_alone(tmp_path):
    # The worker's threads (the embedded default's) and the rest of the process go on as
    # themselves meanwhile: nothing of the process is switched for the block.
    directory = tmp_path / "kept"
    directory.mkdir(mode=0o700)
    (directory / "a").write_text("x")
    seen = {}
    asked = threading.Event()

    def read() -> None:  # a thread already running, as the worker's are
        asked.wait(10)
        seen.update(names=os.listdir(directory), uid=os.geteuid())

    reader = threading.Thread(target=read)
    reader.start()
    with denied(directory):
        with pytest.raises(PermissionError):
            os.listdir(directory)
        asked.set()
        reader.join()
    assert seen == {"names": ["a"], "uid": os.geteuid()}
    assert os.listdir(directory) == ["a"] and stat.S_IMODE(directory.stat().st_mode) == 0o700
