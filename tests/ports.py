"""A port for a server started in a process of its own (tests and benchmarks): no Django here,
so the benchmarks import it too."""
from __future__ import annotations

import random
import socket
from pathlib import Path


def free_port() -> int:
    """A port nothing listens on, for a server a test starts in a process of its own.

    Chosen below the kernel's ephemeral range, where a socket bound to port 0 gets its port
    (the fake servers of tests running alongside, outgoing connections): a port picked
    there could be taken by one of those in the seconds before the server binds it, and
    the test would then talk to that instead."""
    try:
        ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral = 32768
    for _ in range(200):
        port = random.randrange(max(ephemeral - 12000, 1024), ephemeral)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port below the ephemeral range")
