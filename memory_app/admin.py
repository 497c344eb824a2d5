from __future__ import annotations

from django import forms
from django.contrib import admin, messages

from tenancy.admin_scoping import OwnerRankedAdminMixin, TenantScopedAdminMixin
from tenancy.models import Membership

from .models import CompactRequest, LearnedSkill, Memory
from .services import DuplicateMemory, memory_add, memory_content_hash, memory_delete, memory_update


class MemoryForm(forms.ModelForm):
    class Meta:
        model = Memory
        fields = ["tenant", "qor", "user", "type", "content", "channels", "period_start", "period_end",
                  "source_session"]

    def clean(self):
        data = super().clean()
        # On a change page the tenant is read-only: the memory's own.
        tenant = data.get("tenant") or (self.instance.tenant if self.instance.tenant_id else None)
        qor = data.get("qor")
        if tenant is not None and qor is not None and qor.tenant_id != tenant.pk:
            self.add_error("qor", "This Qor belongs to another tenant.")
        user = data.get("user")
        # A memory is given to a member; one kept from a person who has since left (or an
        # anonymous webchat visitor's) stays theirs while the rest of it is edited.
        if (tenant is not None and user is not None and (self.instance.pk is None or "user" in self.changed_data)
                and not Membership.objects.filter(tenant=tenant, user=user).exists()):
            self.add_error("user", "This user is not a member of the tenant.")
        session = data.get("source_session")
        if tenant is not None and session is not None and session.tenant_id != tenant.pk:
            self.add_error("source_session", "This session belongs to another tenant.")
        content = (data.get("content") or "").strip()
        if tenant is not None and qor is not None and content and data.get("type"):
            clash = Memory.objects.filter(
                tenant=tenant, qor=qor, user=data.get("user"), type=data["type"],
                content_hash=memory_content_hash(content),
            )
            if self.instance.pk:
                clash = clash.exclude(pk=self.instance.pk)
            if clash.exists():
                raise forms.ValidationError("This user already has the same memory of this type.")
        return data


@admin.register(Memory)
class MemoryAdmin(OwnerRankedAdminMixin, admin.ModelAdmin):
    """Memories are written through the memory services, so duplicates are refused and
    the full-text index stays in step. Tenant admins see their tenants' memories only.

    What the Qor remembers of an owner is read back to it in every chat with them: a
    workspace admin who is not an owner neither writes, changes nor deletes an owner's
    memories (one planted there would steer the owner's Qor). They still see them listed,
    read-only, as they read the owner's sessions: a memory gone wrong is theirs to notice
    and raise with the owner."""

    person_fields = ("user",)

    form = MemoryForm
    list_display = ["id", "tenant", "qor", "user", "type", "short_content", "period_start", "period_end",
                    "created_at"]
    list_filter = ["tenant", "type", "created_at"]
    search_fields = ["content", "user__username"]
    list_select_related = ["tenant", "qor__tenant", "user"]  # the Qor's name reads its tenant's slug
    raw_id_fields = ["user", "source_session"]
    readonly_fields = ["created_at", "updated_at"]
    date_hierarchy = "created_at"
    show_full_result_count = False

    @admin.display(description="content")
    def short_content(self, obj: Memory) -> str:
        return obj.content[:120]

    def save_model(self, request, obj: Memory, form, change: bool) -> None:
        self.check_tenant(request, obj)
        if change:
            try:
                memory_update(memory=obj)
            except DuplicateMemory as exc:  # raced past the form's check
                self.message_user(request, str(exc), messages.ERROR)
            return
        memory, _ = memory_add(
            tenant=obj.tenant, qor=obj.qor, user=obj.user, type=obj.type, content=obj.content,
            channels=obj.channels or (), period_start=obj.period_start, period_end=obj.period_end,
            source_session_id=obj.source_session_id,
        )
        obj.pk, obj.content_hash, obj.created_at, obj.updated_at = (
            memory.pk, memory.content_hash, memory.created_at, memory.updated_at
        )
        obj._state.adding = False

    def delete_model(self, request, obj: Memory) -> None:
        memory_delete(memories=[obj])

    def delete_queryset(self, request, queryset) -> None:
        memory_delete(memories=list(queryset))


@admin.register(LearnedSkill)
class LearnedSkillAdmin(TenantScopedAdminMixin, admin.ModelAdmin):
    """Skills from files are read-only here (edit or delete the file, then `qorven
    sync-skills`); skills made here are the admin's and no sync touches them. Shared
    skills (no tenant) are the host's: tenant admins see and make their tenants' own."""

    list_display = ["name", "tenant", "source", "min_trust", "enabled", "path", "updated_at"]
    list_filter = ["tenant", "source", "enabled", "min_trust"]
    search_fields = ["name", "description"]
    fields = ["tenant", "name", "description", "min_trust", "enabled", "body", "triggers", "reply", "action",
              "action_args", "source", "path", "checksum"]
    readonly_fields = ["source", "path", "checksum"]

    def get_readonly_fields(self, request, obj: LearnedSkill | None = None) -> list[str]:
        # The scoping base adds the tenant on a change page: a skill stays shared, or in
        # the tenant it was made in, as every scoped row does.
        fields = super().get_readonly_fields(request, obj)
        if obj is not None and obj.source == LearnedSkill.Source.FILE:
            return fields + [name for name in self.fields if name not in fields]
        return fields

    def save_model(self, request, obj: LearnedSkill, form, change: bool) -> None:
        if not change:
            obj.source = LearnedSkill.Source.ADMIN
        super().save_model(request, obj, form, change)


@admin.register(CompactRequest)
class CompactRequestAdmin(TenantScopedAdminMixin, admin.ModelAdmin):
    """/compacts still waiting for their summary: one the sweeper keeps queuing again
    (`tries`) shows here. Deleting one stops its retries; the person is told nothing more."""

    list_display = ["__str__", "tenant", "channel", "tries", "created_at", "updated_at"]
    list_filter = ["tries"]
    list_select_related = ["tenant"]
    readonly_fields = [f.name for f in CompactRequest._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False
