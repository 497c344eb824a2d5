"""A directory out of reach for one block of a test, in its own thread only.

Taking its mode away is enough for an ordinary user; root reads and writes whatever the
mode says, through two capabilities (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH). Linux keeps
capabilities per thread and the capset system call changes only the calling thread's
(unlike seteuid, which glibc applies to every thread of the process): so for the block
this thread drops those two and reads the mode as anyone else would, while the rest of
the process — the embedded worker's threads among them — goes on as it was (a thread
started within the block inherits the dropped pair).
"""
from __future__ import annotations

import ctypes
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_CAPABILITY_VERSION_3 = 0x20080522
_DAC_BYPASS = (1 << 1) | (1 << 2)  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH


class _Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _Data(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


_libc = ctypes.CDLL(None, use_errno=True)


def _capabilities(set_to: ctypes.Array[_Data] | None = None) -> ctypes.Array[_Data]:
    """This thread's capabilities (pid 0: the calling thread), first set to `set_to`."""
    header = _Header(_CAPABILITY_VERSION_3, 0)
    data = (_Data * 2)()
    if set_to is not None and _libc.capset(ctypes.byref(header), set_to) != 0:
        raise OSError(ctypes.get_errno(), "capset")
    if _libc.capget(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capget")
    return data


@contextmanager
def denied(directory: Path, mode: int = 0) -> Iterator[None]:
    """Run the block with `directory`'s mode set to `mode` (none: it cannot be read, listed
    or written), which this thread respects though it runs as root."""
    kept = stat.S_IMODE(directory.stat().st_mode)
    before = _capabilities()
    lowered = (_Data * 2)()
    ctypes.memmove(lowered, before, ctypes.sizeof(before))
    lowered[0].effective &= ~_DAC_BYPASS
    directory.chmod(mode)
    try:
        _capabilities(set_to=lowered)
        try:
            yield
        finally:
            _capabilities(set_to=before)
    finally:
        os.chmod(directory, kept)
