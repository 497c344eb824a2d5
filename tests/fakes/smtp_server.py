"""A scripted SMTP server on loopback: a real SMTP conversation (RFC 5321 replies), with
the answer to each verb given by the test. It speaks plain SMTP only (no STARTTLS)."""
from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

ANSWERS = {b"EHLO": b"250-mail.example\r\n250 AUTH PLAIN LOGIN\r\n", b"HELO": b"250 mail.example\r\n",
           b"AUTH": b"235 2.7.0 Authentication successful\r\n", b"MAIL": b"250 2.1.0 Ok\r\n",
           b"RCPT": b"250 2.1.5 Ok\r\n", b"DATA": b"354 End data with <CR><LF>.<CR><LF>\r\n",
           b"RSET": b"250 2.0.0 Ok\r\n", b"NOOP": b"250 2.0.0 Ok\r\n", b"QUIT": b"221 2.0.0 Bye\r\n"}


@contextmanager
def smtp_server(**answers: bytes) -> Iterator[int]:
    """Serve SMTP on a loopback port (yielded) until the block ends; `answers` replaces
    the reply to a verb (RCPT=b"550 5.1.1 no such user\\r\\n")."""
    replies = {**ANSWERS, **{verb.encode(): answer for verb, answer in answers.items()}}
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)

    def converse(conn: socket.socket) -> None:
        with conn, conn.makefile("rb") as lines:
            conn.sendall(b"220 mail.example ESMTP\r\n")
            in_data = False
            for line in lines:
                if in_data:
                    if line in (b".\r\n", b".\n"):
                        in_data = False
                        conn.sendall(b"250 2.0.0 Ok: queued\r\n")
                    continue
                verb = line[:4].upper()
                conn.sendall(replies.get(verb, b"250 Ok\r\n"))
                in_data = verb == b"DATA" and replies[b"DATA"].startswith(b"354")
                if verb == b"QUIT":
                    break

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=converse, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield listener.getsockname()[1]
    finally:
        try:  # wakes the accept() waiting in the serving thread, which close() alone does not
            listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        listener.close()
