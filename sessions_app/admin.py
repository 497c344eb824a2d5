from __future__ import annotations

from django.contrib import admin
from django.core.paginator import Paginator
from django.urls import reverse
from django.utils.functional import cached_property
from django.utils.html import format_html, format_html_join

from tenancy.admin_scoping import TenantScopedAdminMixin, admin_tenant_ids

from .models import Image, Message, MovedThread, Session
from .selectors import answer_notice, messages_read

INLINE_MESSAGES = 200


class ReadOnlyAdmin(TenantScopedAdminMixin, admin.ModelAdmin):
    """The conversation store is written by its services only: here it is read, by the host
    and by tenant admins for their own tenants. The overrides below win over the scoping
    mixin's (which would let tenant admins change rows), and a tenant admin deletes no
    conversation data: a session or message deleted here would be gone from every surface."""

    tenant_admin_can_delete = False

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Session)
class SessionAdmin(ReadOnlyAdmin):
    list_display = ["id", "tenant", "qor", "user", "kind", "channel", "state", "last_seq", "started_at"]
    list_filter = ["kind", "state", "tenant"]
    search_fields = ["user__username", "external_thread_id"]
    # The Qor column reads "acme/aria": its tenant comes with it, not one query a row.
    list_select_related = ["tenant", "qor__tenant", "user"]
    readonly_fields = [f.name for f in Session._meta.fields] + ["recent_messages"]

    @admin.display(description=f"Messages (newest {INLINE_MESSAGES})")
    def recent_messages(self, obj: Session) -> str:
        # Only the newest page inline: a long session must not render a million rows. The
        # link's list is scoped like this page, so it shows this session's messages only to
        # whoever may see the session.
        rows = messages_read(session=obj, limit=INLINE_MESSAGES)
        all_url = reverse("admin:sessions_app_message_changelist") + f"?session__id__exact={obj.pk}"
        body = format_html_join(
            "",
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td style='white-space:pre-wrap'>{}</td>"
            "<td>{}</td></tr>",
            ((m.seq, m.created_at.strftime("%Y-%m-%d %H:%M:%S"), m.role, m.channel, m.sender_name, m.content,
              answer_shown(m.answer_state, m.metadata))
             for m in rows),
        )
        return format_html(
            "<p><a href='{}'>All {} messages</a></p><table><tr><th>seq</th><th>time</th><th>role</th>"
            "<th>channel</th><th>sender</th><th>content</th><th>answer</th></tr>{}</table>",
            all_url, obj.last_seq, body,
        )


REPLACED = "replaced (written again)"


def answer_shown(answer_state: str | None, metadata: dict | None) -> str:
    """The answer column: a message's answer state, or, for a reply the person had written
    again (regenerate: kept, read by no surface, the model or the summarizer), that it was
    replaced — else it reads as something the Qor still stands by."""
    if isinstance(metadata, dict) and metadata.get("superseded"):
        return REPLACED
    return answer_state or ""


class CappedCountPaginator(Paginator):
    """Counts no further than CAP rows. An exact COUNT(*) reads every message the filters
    let through, on every page load: the whole host's history for an unfiltered list.
    Past CAP the page says "More than …" (templates/admin/sessions_app/message/pagination.html)
    and the filters narrow it down."""

    CAP = 10_000

    @cached_property
    def count(self) -> int:
        return self.object_list[: self.CAP + 1].count()

    @property
    def capped(self) -> bool:
        return self.count > self.CAP

    @property
    def cap_shown(self) -> str:
        return f"{self.CAP:,}"


@admin.register(Message)
class MessageAdmin(ReadOnlyAdmin):
    # Scoped through the session, whose tenant is indexed: messages have no index that
    # leads with their own tenant column (each one would slow every append), so filtering
    # on it read the whole table, every tenant's messages, to find one tenant's.
    tenant_field = "session__tenant"
    paginator = CappedCountPaginator
    list_display = ["session", "seq", "role", "channel", "sender_name", "short_content", "answer", "created_at"]
    # "failed" lists the messages the Qor could not answer. Each one's page shows the
    # notice the person was shown; the host also sees the provider's own words
    # (answer_error), which may name its key or its address: never a tenant's to read.
    list_filter = ["answer_state", "role", "channel"]
    list_select_related = ["session"]
    readonly_fields = [f.name for f in Message._meta.fields] + ["notice_shown"]
    show_full_result_count = False
    # The model's order, by the columns of the (session, seq) index: ordering by "session"
    # would join the sessions table and sort the whole list by it.
    ordering = ["session_id", "seq"]

    @admin.display(description="content")
    def short_content(self, obj: Message) -> str:
        return obj.content[:120]

    @admin.display(description="answer", ordering="answer_state")
    def answer(self, obj: Message) -> str:
        return answer_shown(obj.answer_state, obj.metadata)

    @admin.display(description="notice shown instead of an answer")
    def notice_shown(self, obj: Message) -> str:
        return (answer_notice(message=obj) or "") if obj.answer_state == Message.Answer.FAILED else ""

    def get_fields(self, request, obj=None) -> list[str]:
        fields = list(super().get_fields(request, obj))
        if admin_tenant_ids(request.user) is not None:  # a tenant admin: our notice only
            fields.remove("answer_error")
        return fields


@admin.register(Image)
class ImageAdmin(ReadOnlyAdmin):
    list_display = ["id", "tenant", "mime_type", "size", "reading", "created_at"]
    list_filter = ["tenant", "mime_type", "reading"]
    exclude = ["data"]

    def get_queryset(self, request):
        # The attachment itself (base64, up to QORVEN_MAX_UPLOAD) is never shown here: a
        # list of 100 would read up to a gigabyte to show their sizes; nor is a PDF's text
        # (up to 100,000 characters) read for the list.
        return super().get_queryset(request).defer("data", "text")


@admin.register(MovedThread)
class MovedThreadAdmin(ReadOnlyAdmin):
    """Group chats the platform gave a new id (a Telegram group upgraded to a supergroup):
    their conversation goes on under the new id, and a late message naming the old one
    joins it there. Written by the move itself (sessions_app.thread_moves), read here."""

    list_display = ["qor", "channel", "old_thread", "new_thread", "moved_at"]
    list_filter = ["channel", "tenant"]
    search_fields = ["old_thread", "new_thread"]
    list_select_related = ["qor__tenant"]
    readonly_fields = [f.name for f in MovedThread._meta.fields]
