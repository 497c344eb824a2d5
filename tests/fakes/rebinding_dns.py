"""A host name whose DNS answer changes between lookups, as a rebinding attacker's name
server makes it: the first lookups get a public address, every one after them another
(loopback, where the test's servers listen). Installed over `socket.getaddrinfo`, which
the address check, the blocking clients and asyncio's resolver all ask; other names
resolve as usual."""
from __future__ import annotations

import socket
from typing import Any

PUBLIC = "93.184.215.14"  # a public address (example.com's); nothing here ever connects to it


class RebindingName:
    def __init__(self, name: str = "model.rebind.test", *, first: str = PUBLIC, then: str = "127.0.0.1",
                 first_answers: int = 1) -> None:
        self.name = name
        self.first = first
        self.then = then
        self.first_answers = first_answers
        self.lookups: list[str] = []  # the address each lookup of the name was given, in order
        self._real = socket.getaddrinfo

    def install(self, monkeypatch: Any) -> RebindingName:
        monkeypatch.setattr(socket, "getaddrinfo", self.getaddrinfo)
        return self

    def getaddrinfo(self, host: Any, port: Any, family: int = 0, type: int = 0, proto: int = 0,  # noqa: A002
                    flags: int = 0) -> list[Any]:
        name = host.decode() if isinstance(host, bytes) else host
        if name is None or name.lower().rstrip(".") != self.name:
            return self._real(host, port, family, type, proto, flags)
        address = self.first if len(self.lookups) < self.first_answers else self.then
        self.lookups.append(address)
        if family not in (0, socket.AF_INET):
            raise socket.gaierror(socket.EAI_NONAME, "no address of that family")
        number = int(port) if port not in (None, "") else 0
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (address, number))]
