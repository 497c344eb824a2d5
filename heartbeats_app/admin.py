"""Heartbeats in the admin: schedule, next run, last status, tokens spent; run now, pause,
resume. Managed (config-owned) beats are read-only. Tenant admins see their tenants only."""
from __future__ import annotations

from datetime import datetime

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html

from tenancy.access import tenant_serving
from tenancy.admin_scoping import OwnerRankedAdminMixin, TenantScopedInlineMixin, admin_tenant_ids

from .cron import timezone_parse
from .errors import HeartbeatInvalid, HeartbeatReadOnly
from .models import Heartbeat, HeartbeatRun
from .selectors import heartbeat_next_run, heartbeat_timezone
from .services import (
    heartbeat_check,
    heartbeat_create,
    heartbeat_delete,
    heartbeat_run_now,
    heartbeat_set_enabled,
    heartbeat_update,
)

EDITABLE = ["tenant", "qor", "name", "cron", "timezone", "prompt", "owner", "deliver_to", "deliver_channel", "enabled"]


class HeartbeatForm(forms.ModelForm):
    system = False  # set per request: superusers may create the reserved system beats
    reader = None  # set per request: the admin, who reads a refusal
    refused = ""  # set per request: why the save was refused twice (HeartbeatAdmin.changeform_view)

    class Meta:
        model = Heartbeat
        fields = EDITABLE

    def clean(self):
        data = super().clean()
        self._service_check(data)
        if self.refused:  # after the check: a field it finds at fault is shown on that field too
            self.add_error(None, self.refused)
        return data

    def _service_check(self, data: dict) -> None:
        # On a change page tenant and qor are read-only: they come from the instance.
        tenant = data.get("tenant") or (self.instance.tenant if self.instance.tenant_id else None)
        qor = data.get("qor") or (self.instance.qor if self.instance.qor_id else None)
        if tenant is None or qor is None or self.errors:
            return
        try:
            data["cron"] = heartbeat_check(
                tenant=tenant, qor=qor, name=data.get("name") or "", cron=data.get("cron") or "",
                prompt=data.get("prompt") or "", timezone=data.get("timezone") or "", owner=data.get("owner"),
                deliver_to=data.get("deliver_to"), deliver_channel=data.get("deliver_channel") or "",
                system=self.system or (self.instance.pk is not None and self.instance.name == data.get("name")),
                exclude_id=self.instance.pk, reader=self.reader,
                stored_cron=self.instance.cron if self.instance.pk is not None else None,
            )
        except HeartbeatInvalid as exc:
            field = exc.field if exc.field in self.fields else None
            self.add_error(field, exc.message)


class _RefusedOnSave(Exception):
    """The service refused what the form had passed: something changed in between (a name
    taken, an owner gone). Raised out of the admin's transaction, which rolls back."""


def _for_the_host(request: HttpRequest, fields, detail: str) -> list[str]:
    """`fields` without `detail` (a failure's own text, which may name a key or the host's
    address) unless the host reads them; a tenant admin reads the error in our words."""
    return [f for f in fields if f != detail or admin_tenant_ids(request.user) is None]


def _month_day(moment: datetime) -> str:
    """"02-29 09:00", with the year when it is not this one (in the beat's zone): a rare
    schedule's next run may be years away ('0 9 29 2 1': 2044)."""
    if moment.year == timezone.now().astimezone(moment.tzinfo).year:
        return moment.strftime("%m-%d %H:%M")
    return moment.strftime("%Y-%m-%d %H:%M")


class HeartbeatRunInline(TenantScopedInlineMixin, admin.TabularInline):
    model = HeartbeatRun
    extra = 0
    max_num = 0
    can_delete = False
    ordering = ["-tick"]
    fields = ["tick", "manual", "status", "reason", "attempts", "duration_ms", "tokens", "short_output", "error",
              "error_detail"]
    readonly_fields = fields
    verbose_name_plural = "recent runs"

    def get_fields(self, request, obj=None):
        return _for_the_host(request, super().get_fields(request, obj), "error_detail")

    @admin.display(description="output")
    def short_output(self, obj: HeartbeatRun) -> str:
        return obj.output[:300]

    def has_add_permission(self, request, obj=None) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


@admin.register(Heartbeat)
class HeartbeatAdmin(OwnerRankedAdminMixin, admin.ModelAdmin):
    form = HeartbeatForm
    # A beat runs as its recipient, else its owner, with their memories and chats, and
    # tells them what it found: an owner's is theirs (and the host's) to change, run,
    # switch or delete. A workspace admin still sees it listed, read-only, with what it
    # spends: what the workspace runs is theirs to know, and to raise with the owner.
    person_fields = ("owner", "deliver_to")
    # The Qor column names its tenant too ("acme/aria"); cron and timezone read as one, and
    # so do the last run's status, time and tokens: the list fits beside the admin's menus.
    list_display = ["title", "qor", "schedule", "enabled", "next_run", "last_run"]
    list_filter = ["tenant", "enabled", "managed", "last_status"]
    # The Qor's name reads its tenant's slug; the next run, the task's last run.
    list_select_related = ["tenant", "qor__tenant", "periodic_task"]
    search_fields = ["name", "prompt"]
    actions = ["run_now", "enable", "disable"]
    inlines = [HeartbeatRunInline]
    readonly_fields = ["managed", "next_run", "last_run_at", "last_status", "last_duration_ms", "last_output",
                       "last_error", "last_error_detail", "tokens_spent", "periodic_task"]
    fieldsets = [
        (None, {"fields": ["tenant", "qor", "name", "enabled", "managed"]}),
        ("Schedule", {"fields": ["cron", "timezone", "next_run", "periodic_task"]}),
        ("Task", {"fields": ["prompt", "owner", "deliver_to", "deliver_channel"]}),
        ("Last run", {"fields": ["last_run_at", "last_status", "last_duration_ms", "last_output", "last_error",
                                 "last_error_detail", "tokens_spent"]}),
    ]

    def get_fieldsets(self, request, obj=None):
        return [(name, {**options, "fields": _for_the_host(request, options["fields"], "last_error_detail")})
                for name, options in super().get_fieldsets(request, obj)]

    @admin.display(description="name", ordering="name")
    def title(self, obj: Heartbeat) -> str:
        if obj.managed:
            return format_html('{} <span style="color:var(--body-quiet-color)" title="{}">· managed</span>', obj.name,
                               "kept in sync with the defaults file: read-only here")
        return obj.name

    @admin.display(description="schedule", ordering="cron")
    def schedule(self, obj: Heartbeat) -> str:
        return format_html('<code style="white-space:nowrap">{}</code> {}', obj.cron, heartbeat_timezone(obj))

    @admin.display(description="next run")
    def next_run(self, obj: Heartbeat) -> str:
        if obj.pk is None:
            return "-"
        when = heartbeat_next_run(obj)
        return _month_day(when) if when else ("paused" if not obj.enabled else "-")

    @admin.display(description="last run", ordering="last_run_at")
    def last_run(self, obj: Heartbeat) -> str:
        if obj.last_run_at is None:
            return "never"
        when = obj.last_run_at.astimezone(timezone_parse(heartbeat_timezone(obj)))
        # Status, time and tokens each on a line of their own, as narrow as "next run": one
        # line of all three pushed the list past a laptop's width once a beat had run.
        tokens = format_html("<br>{} tokens", f"{obj.tokens_spent:,}") if obj.tokens_spent else ""
        return format_html("{}<br>{}{}", self.status(obj), _month_day(when), tokens)

    @admin.display(description="last status", ordering="last_status")
    def status(self, obj: Heartbeat) -> str:
        colour = {"ok": "green", "noop": "grey", "skipped": "grey", "failed": "#ba2121"}.get(obj.last_status, "")
        label = obj.last_status
        if obj.last_status == "ok" and obj.last_error:  # went through, not cleanly: cut off, or not delivered
            colour, label = "#b26b00", "ok ⚠"
        return format_html('<span style="color:{}" title="{}">{}</span>', colour, obj.last_error, label)

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change, **kwargs)
        form.system = request.user.is_superuser
        form.reader = request.user
        form.refused = getattr(request, "heartbeat_refused", "")
        return form

    def get_readonly_fields(self, request, obj=None):
        fields = list(super().get_readonly_fields(request, obj))  # the tenant, on a change page (the scoping base)
        return fields + ["qor"] if obj is not None else fields

    def has_change_permission(self, request, obj=None) -> bool:
        if obj is not None and obj.managed:
            return False  # owned by the defaults file
        return super().has_change_permission(request, obj)

    def has_delete_permission(self, request, obj=None) -> bool:
        if obj is not None and obj.managed:
            return False
        return super().has_delete_permission(request, obj)

    def changeform_view(self, request, object_id=None, form_url="", extra_context=None):
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except _RefusedOnSave:
            pass
        # Once more on what is stored now: the form's own check finds what changed and the
        # page shows it on its field, with what was typed, as for any refusal.
        try:
            return super().changeform_view(request, object_id, form_url, extra_context)
        except _RefusedOnSave as refused:  # it changed again in between: save nothing
            # The form once more, refusing with the reason: the page keeps what was typed
            # (a redirect with a message lost it all).
            request.heartbeat_refused = f"Not saved, the beat changed meanwhile: {refused}"  # type: ignore[attr-defined]
        return super().changeform_view(request, object_id, form_url, extra_context)

    def save_model(self, request: HttpRequest, obj: Heartbeat, form, change: bool) -> None:
        self.check_tenant(request, obj)
        data = {f: form.cleaned_data.get(f) for f in EDITABLE}
        data["timezone"] = data["timezone"] or ""
        data["deliver_channel"] = data["deliver_channel"] or ""
        try:
            if change:
                heartbeat_update(
                    heartbeat=obj, name=data["name"], cron=data["cron"], prompt=data["prompt"],
                    timezone=data["timezone"], owner=data["owner"], deliver_to=data["deliver_to"],
                    deliver_channel=data["deliver_channel"], enabled=data["enabled"],
                    system=request.user.is_superuser, reader=request.user,
                )
            else:
                created = heartbeat_create(**data, system=request.user.is_superuser, reader=request.user)
                obj.pk = created.pk
        except (HeartbeatInvalid, HeartbeatReadOnly) as exc:
            raise _RefusedOnSave(str(exc)) from exc
        obj.refresh_from_db()

    def delete_model(self, request: HttpRequest, obj: Heartbeat) -> None:
        heartbeat_delete(heartbeat=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet) -> None:
        skipped = 0
        for beat in queryset:
            if beat.managed:
                skipped += 1
                continue
            heartbeat_delete(heartbeat=beat)
        if skipped:
            self.message_user(request, f"{skipped} managed beat(s) left alone: change the defaults file.",
                              messages.WARNING)

    @admin.action(description="Run now", permissions=["change"])
    def run_now(self, request: HttpRequest, queryset: QuerySet) -> None:
        allowed, owners = self.owners_rows_apart(request, queryset.select_related("tenant"))
        beats, held = [], []
        for beat in allowed:
            # A suspended workspace's beats do not run (qorven.agent.heartbeat_runs): not "queued" for nothing.
            (beats if tenant_serving(beat.tenant) else held).append(beat)
        for beat in beats:
            heartbeat_run_now(heartbeat=beat)
        if beats:
            self.message_user(request, f"Queued {len(beats)} run(s): {', '.join(b.name for b in beats)}.")
        if held:
            self.message_user(request, f"Not run, their workspace is suspended: {', '.join(b.name for b in held)}.",
                              messages.WARNING)
        self._owners_left(request, owners)

    @admin.action(description="Enable (resume)", permissions=["change"])
    def enable(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._set_enabled(request, queryset, True)

    @admin.action(description="Disable (pause)", permissions=["change"])
    def disable(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._set_enabled(request, queryset, False)

    def _set_enabled(self, request: HttpRequest, queryset: QuerySet, enabled: bool) -> None:
        allowed, owners = self.owners_rows_apart(request, queryset)
        changed, managed = 0, []
        for beat in allowed:
            try:
                heartbeat_set_enabled(heartbeat=beat, enabled=enabled)
                changed += 1
            except HeartbeatReadOnly:
                managed.append(beat.name)
        verb = "enabled" if enabled else "disabled"
        self.message_user(request, f"{changed} beat(s) {verb}.")
        if managed:
            self.message_user(request, f"Managed beats are read-only, left as they are: {', '.join(managed)}.",
                              messages.WARNING)
        self._owners_left(request, owners)

    def _owners_left(self, request: HttpRequest, owners: list[Heartbeat]) -> None:
        if owners:
            self.message_user(request, "Only an owner of the workspace switches, runs or changes an owner's beats, "
                                       f"left as they are: {', '.join(b.name for b in owners)}.", messages.ERROR)
