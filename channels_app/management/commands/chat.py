from __future__ import annotations

import os
import sys

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from channels_app.chat import chat_owner
from channels_app.json_body import QUERY_INT_MAX
from qorven.runtime.arguments import seconds, whole_number

# Seconds a message waits for a server's answer before it is sent again (kept here, not in
# the terminal client, so that `qorven chat --help` imports no HTTP client). Our message
# API answers within seconds, a slow database included (a pooled connection waited for
# QORVEN_DB_POOL_TIMEOUT, then a 503), so past this the server is stuck; a try sent again
# carries the message's Idempotency-Key and is stored once. Four tries: 60 s at most.
SEND_TIMEOUT = 15.0
from tenancy.errors import NotFound
from tenancy.selectors import membership_get, qor_get, qor_slugs, tenant_get


class Command(BaseCommand):
    help = (
        "Chat with a Qor from the terminal (channel `tui`), in the same conversation as the web page, "
        "Telegram and every other surface: prints the recent timeline with channel tags, streams "
        "replies, and shows messages arriving from other channels while you type; Ctrl-C stops a reply being "
        "written, and Ctrl-D, /quit or Ctrl-C at the empty prompt leaves. When a server answers "
        "at --server (default QORVEN_PUBLIC_URL) it talks to it like a browser page does, so pages open "
        "there see the terminal live; with none running it works on the database alone. A plain http:// "
        "address of another machine is refused unless --insecure-http is given: the terminal's sign-in token "
        "would cross the network unencrypted. "
        "Losing access to the workspace meanwhile — removed from it, or this terminal signed out (its token "
        "revoked) — ends it at once with exit code 3, in either mode; leaving ends it with 0. Long messages "
        "are wrapped between words at the terminal's width (a line of code or a table's is cut at the edge and goes on after ↪). "
        "--json reads one JSON object a line "
        'from stdin ({"content": "…"}) and writes one a line ({"type": "message" | "notice" | "chunk" '
        '| "restart" | "done" | "session" | "error", …}: "restart" when the text streamed so far was not the '
        'answer (a thinking model\'s reasoning) and the reply streams again, "session" when /clear or a '
        'compaction starts a new conversation, '
        '"error" for a line it could not read, or with "code": "access_lost" when you lose access to the '
        "workspace, before it exits 3); at the end of input it waits "
        "for the replies (as the terminal reading a pipe does), then exits (1 if it gave up waiting); a line "
        '{"content": "/quit"} (or "/exit") leaves at once with exit code 0, sending nothing and not waiting '
        "for replies still to come; Ctrl-C "
        "leaves it at once (exit 130). In either mode a SIGTERM or a closed terminal (SIGHUP) leaves at once (exit 143 or 129), signing the terminal out of "
        "the server as leaving does; with no server, a reply being written is stored first, so it is not lost. "
        "More signals while it leaves change nothing of that."
    )

    def add_arguments(self, parser):
        parser.add_argument("--tenant", required=True, help="tenant slug")
        parser.add_argument("--qor", required=True, help="Qor slug")
        parser.add_argument("--user", required=True, help="your username (a member of the tenant)")
        parser.add_argument("--json", action="store_true", help="newline-delimited JSON in and out, for scripts")
        parser.add_argument(
            "--history", type=whole_number(0, QUERY_INT_MAX), default=None,
            help="how many recent messages to print first, 0 or more (default 20; 0 with --json)",
        )
        parser.add_argument(
            "--server", default=None, metavar="URL",
            help="the running Qorven server to talk to; one named here that does not answer is an error. "
                 "Left out: QORVEN_PUBLIC_URL, and if no server answers there the terminal works on the "
                 "database directly",
        )
        parser.add_argument("--no-server", action="store_true",
                            help="work on the database directly even when a server is running")
        parser.add_argument(
            "--insecure-http", action="store_true",
            help="talk to a server at a plain http:// address on another machine all the same: the terminal's "
                 "sign-in token and your messages cross the network unencrypted. Without it such an address "
                 "(as --server, or QORVEN_PUBLIC_URL) is refused; http:// to this machine (127.0.0.0/8, ::1, "
                 "localhost) and https:// anywhere need nothing",
        )
        parser.add_argument(
            "--timeout", type=seconds(more_than_zero=True), default=SEND_TIMEOUT,
            help="with a server: seconds a message waits for the server's answer before it is sent again, "
                 f"under the same Idempotency-Key (four tries in all, each said; default {SEND_TIMEOUT:g})",
        )
        parser.add_argument(
            "--wait", type=seconds(), default=300.0,
            help="--json, or reading a pipe: seconds to wait for the replies still to come after the input "
                 "ends (default 300)",
        )

    def handle(self, *args, **opts):
        # The terminal client (wcwidth, prompt_toolkit) is imported by the chat itself, not
        # by `qorven --help` or `qorven chat --help`.
        from channels_app.terminal import ACCESS_LOST, run_json
        from channels_app.terminal_leave import leaving
        from channels_app.terminal_screen import run_interactive

        import logging

        logging.getLogger("celery").setLevel(logging.WARNING)  # task lines would interleave with the chat
        user = get_user_model().objects.filter(username=opts["user"], is_active=True).first()
        if user is None:
            raise CommandError(f"no user {opts['user']!r}")
        try:
            owner = chat_owner(user=user, tenant_slug=opts["tenant"], qor_slug=opts["qor"], surface="tui")
        except NotFound as exc:
            raise CommandError(_not_found(exc, user=user, tenant_slug=opts["tenant"], qor_slug=opts["qor"])) from None
        history = opts["history"] if opts["history"] is not None else (0 if opts["json"] else 20)
        link, unanswered = None, ""
        if not opts["no_server"]:
            from django.conf import settings

            from channels_app.terminal_client import ServerLink, plain_http_to_another_machine

            server = opts["server"] or settings.QORVEN_PUBLIC_URL
            if opts["server"] and not _is_http_url(server):  # else "no server answers at notaurl"
                raise CommandError(f"--server {server} is not a URL: give the server's address as "
                                   "http://host:port or https://host (leave out --server to work on the "
                                   "database directly)")
            if not opts["insecure_http"] and plain_http_to_another_machine(server):
                # Refused before even the probe: the token goes with every request after it.
                named, ways_out = ((f"--server {server}", "Give its https:// address, or --insecure-http")
                                   if opts["server"] else
                                   (f"QORVEN_PUBLIC_URL {server}", "Give --server with its https:// address, "
                                    "--no-server to work on the database directly, or --insecure-http"))
                raise CommandError(f"{named} is plain http to another machine: the terminal's sign-in token and "
                                   f"your messages would cross the network unencrypted. {ways_out} to send them "
                                   "anyway")
            if ServerLink.reachable(server):
                link = ServerLink(owner, server, timeout=opts["timeout"])
            elif opts["server"]:
                raise CommandError(f"no Qorven server answers at {server} (leave out --server to work on the "
                                   "database directly)")
            else:
                unanswered = server
        # A SIGTERM or a SIGHUP leaves like Ctrl-C: through the clean-up that revokes this
        # session's token (terminal_leave has why the handler itself does no more than note it).
        leaving.install(on_leave=link.revoke if link is not None else None)
        try:
            if opts["json"]:
                code = run_json(owner, sys.stdin, sys.stdout, history=history, wait=opts["wait"], link=link)
            else:
                code = run_interactive(owner, history=history, link=link, color=_color(opts), wait=opts["wait"],
                                       unanswered=unanswered)
        except KeyboardInterrupt:
            leaving.leave_if_signalled()  # a SIGTERM came first: its code
            raise SystemExit(130) from None  # the shell's code for Ctrl-C, and no traceback
        leaving.leave_if_signalled()  # one that came as the terminal was leaving anyway
        if code == ACCESS_LOST:
            raise CommandError(f"{opts['user']!r} no longer has access to {opts['tenant']!r}: removed "
                               "from the workspace, or this terminal was signed out", returncode=code)
        if code:
            raise CommandError("gave up waiting for a reply", returncode=code)


def _not_found(exc: NotFound, *, user, tenant_slug: str, qor_slug: str) -> str:
    """What a refused --tenant or --qor is: a workspace they are not a member of (or none),
    or, for a member, a Qor the workspace does not have, with the ones it has."""
    not_theirs = f"{exc} (is {user.get_username()!r} a member of {tenant_slug!r}?)"
    try:
        tenant = tenant_get(slug=tenant_slug)
        membership_get(tenant=tenant, user=user)
    except NotFound:
        return not_theirs  # another workspace's Qors are never named
    try:
        qor_get(tenant=tenant, slug=qor_slug)
    except NotFound:
        return f"no Qor {qor_slug!r} in {tenant_slug!r}: its Qors are {', '.join(qor_slugs(tenant=tenant))}"
    return not_theirs


def _color(opts: dict) -> bool | None:
    """Colours as asked (--no-color, --force-color, the NO_COLOR convention), else None:
    on a terminal, not on a pipe."""
    if opts["no_color"] or os.environ.get("NO_COLOR"):
        return False
    return True if opts["force_color"] else None


def _is_http_url(value: str) -> bool:
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 (raises on a port that is none)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)
