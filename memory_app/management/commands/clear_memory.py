from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from memory_app.selectors import memory_count
from memory_app.services import MemoryScope, memory_clear
from qorven.runtime.sqlite_erase import wal_truncate
from sessions_app.selectors import conversation_counts
from sessions_app.retention import conversations_delete
from tenancy.errors import NotFound
from tenancy.selectors import qor_get, tenant_get


class Command(BaseCommand):
    help = (
        "Delete long-term memories of a tenant, one of its Qors, a user, or everything; with --all also "
        "their sessions, messages and images. Shows what it will delete and asks for confirmation unless "
        "--yes; --dry-run only shows the counts. Prints what it deleted."
    )

    def add_arguments(self, parser):
        parser.add_argument("--tenant", help="tenant slug")
        parser.add_argument("--qor", help="Qor slug (needs --tenant)")
        parser.add_argument("--user", help="username (with --tenant: only in that tenant; alone: in every tenant)")
        parser.add_argument("--everything", action="store_true", help="every tenant (instead of a scope)")
        parser.add_argument("--all", action="store_true", help="also delete sessions, messages and images")
        parser.add_argument("--yes", action="store_true", help="do not ask for confirmation")
        parser.add_argument("--dry-run", action="store_true", help="show what would be deleted, delete nothing")

    def handle(self, *args, **opts):
        scope = self._scope(opts)
        memories = memory_count(**scope.filters())
        conversations = conversation_counts(**scope.filters()) if opts["all"] else None
        self.stdout.write(f"Scope: {_describe(scope)}")
        self.stdout.write(f"  memories: {memories}")
        if conversations is not None:
            for label, n in conversations.items():
                self.stdout.write(f"  {label}: {n}")
        if opts["dry_run"]:
            self.stdout.write("Dry run: nothing deleted.")
            return
        if not memories and not (conversations and any(conversations.values())):
            self.stdout.write("Nothing to delete.")
            self._empty_log()  # what an earlier run, busy then, left in the write-ahead log
            return
        if not opts["yes"] and not self._confirm():
            raise CommandError("Aborted: nothing deleted.")
        deleted = {"memories": memory_clear(scope=scope)}
        if opts["all"]:
            deleted.update(conversations_delete(**scope.filters()))
        self.stdout.write("Deleted " + ", ".join(f"{n} {label}" for label, n in deleted.items()) + ".")
        self._empty_log()

    def _empty_log(self) -> None:
        if not wal_truncate():
            self.stdout.write("The database was busy (a download or another long read): its write-ahead log (the"
                              " -wal file) keeps the deleted text until SQLite's next full checkpoint; run the same"
                              " `qorven clear-memory` again once it is quiet to empty it now.")

    def _scope(self, opts) -> MemoryScope:
        tenant = qor = user = None
        for option in ("tenant", "qor", "user"):
            # Given but empty (`--user "$U"`, U unset) would widen what is deleted, never narrow it.
            if opts[option] is not None and not opts[option].strip():
                raise CommandError(f"--{option} needs a {'username' if option == 'user' else 'slug'}; "
                                   "nothing was deleted.")
        if opts["everything"] and (opts["tenant"] or opts["qor"] or opts["user"]):
            raise CommandError("--everything takes no --tenant, --qor or --user.")
        if opts["qor"] and not opts["tenant"]:
            raise CommandError("--qor needs --tenant.")
        if not (opts["everything"] or opts["tenant"] or opts["user"]):
            raise CommandError("Say whose memories: --tenant (and --qor / --user), --user, or --everything.")
        try:
            if opts["tenant"]:
                tenant = tenant_get(slug=opts["tenant"])
            if opts["qor"]:
                qor = qor_get(tenant=tenant, slug=opts["qor"])
        except NotFound as exc:
            raise CommandError(str(exc)) from None
        if opts["user"]:
            user = get_user_model().objects.filter(username=opts["user"]).first()
            if user is None:
                raise CommandError(f"No user {opts['user']!r}.")
        return MemoryScope(tenant=tenant, qor=qor, user=user, everything=opts["everything"])

    def _confirm(self) -> bool:
        try:
            answer = input("Delete these permanently? Type 'yes' to continue: ")
        except EOFError:  # `</dev/null`, Ctrl-D: no answer is a no, said on a line of its own
            self.stdout.write("")
            raise CommandError("No answer (end of input): nothing deleted.") from None
        return answer.strip().lower() == "yes"


def _describe(scope: MemoryScope) -> str:
    if scope.everything:
        return "every tenant"
    parts = []
    if scope.tenant is not None:
        parts.append(f"tenant {scope.tenant.slug}")
    if scope.qor is not None:
        parts.append(f"Qor {scope.qor.slug}")
    if scope.user is not None:
        parts.append(f"user {scope.user.get_username()}")
    return ", ".join(parts)
