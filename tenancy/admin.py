from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.contrib.auth.password_validation import validate_password
from django.db import transaction
from django.utils import timezone

from qorven.runtime.cooldowns import route_state

from .admin_scoping import (
    OwnerRankedAdminMixin,
    TenantScopedAdminMixin,
    TenantScopedInlineMixin,
    admin_tenant_ids,
    owners_off_limits,
    owns_tenant,
)
from .model_keys import role_api_key, route_key
from .models import ApiToken, McpServer, Membership, ModelFallback, PluginSetting, Qor, Tenant, Usage
from .selectors import tokens_spent_this_month
from .services import memberships_remove
from .signals import person_retimed, tenant_retimed


class MembershipInlineFormSet(forms.BaseInlineFormSet):
    """The workspace page's members, under the rule of MembershipAdmin: owners are made,
    changed and removed by owners (and the host) alone."""

    owns = True  # set per request (MembershipInline.get_formset)

    def clean(self) -> None:
        super().clean()
        if self.owns:
            return
        owner = Membership.Role.OWNER
        for form in self.forms:
            was_owner = form.instance.pk is not None and form.initial.get("role") == owner
            deleted = self.can_delete and self._should_delete_form(form)
            if (was_owner and (deleted or form.has_changed())) or (
                    not deleted and not was_owner and (form.cleaned_data or {}).get("role") == owner):
                raise forms.ValidationError("Only an owner of the workspace makes, changes or removes an owner.")

    def delete_existing(self, obj: Membership, commit: bool = True) -> None:
        if commit:  # as from the membership pages: their API tokens for it go with them
            memberships_remove(memberships=Membership.objects.filter(pk=obj.pk))


class MembershipRowForm(forms.ModelForm):
    """A member's row on the workspace's page: its person is fixed once made, as on the
    membership's own page (a row given to someone else removed one person and let another
    in with the first one's role, past what removing and adding do)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk is not None and "user" in self.fields:
            self.fields["user"].disabled = True


class MembershipInline(TenantScopedInlineMixin, admin.TabularInline):
    model = Membership
    form = MembershipRowForm
    formset = MembershipInlineFormSet
    extra = 0
    fields = ["user", "role"]  # a person's timezone on their own page, where changing it moves their beats
    autocomplete_fields = ["user"]

    def get_formset(self, request, obj=None, **kwargs):
        formset = super().get_formset(request, obj, **kwargs)
        formset.owns = owns_tenant(request.user, obj.pk if obj is not None else None)
        return formset


class QorInline(TenantScopedInlineMixin, admin.StackedInline):
    model = Qor
    extra = 0
    fields = ["name", "slug", "is_default", "summarizer_mode"]
    show_change_link = True


@admin.register(Tenant)
class TenantAdmin(TenantScopedAdminMixin, admin.ModelAdmin):
    tenant_field = ""
    tenant_admin_can_add = False
    tenant_admin_can_delete = False
    list_display = ["slug", "name", "timezone", "monthly_token_budget", "tokens_this_month", "suspended_at",
                    "created_at"]
    list_filter = [("suspended_at", admin.EmptyFieldListFilter)]
    search_fields = ["slug", "name"]
    prepopulated_fields = {"slug": ["name"]}
    # Apps above tenancy add their own inlines from their admin modules (channel bindings).
    inlines = [QorInline, MembershipInline]
    actions = ["suspend", "resume"]

    def get_actions(self, request):
        actions = super().get_actions(request)
        if admin_tenant_ids(request.user) is not None:  # the host's switch alone
            actions.pop("suspend", None)
            actions.pop("resume", None)
        return actions

    @admin.action(description="Suspend the selected workspaces (nobody in them is served; nothing is deleted)")
    def suspend(self, request, queryset) -> None:
        from .services import tenant_suspend

        done = [tenant.slug for tenant in queryset if tenant_suspend(tenant=tenant)]
        self.message_user(request, f"Suspended {len(done)} workspace(s){': ' + ', '.join(done) if done else ''}. "
                                   "What platforms send them is kept, unanswered, until they are resumed.")

    @admin.action(description="Resume the selected workspaces")
    def resume(self, request, queryset) -> None:
        from .services import tenant_resume

        done = [tenant.slug for tenant in queryset if tenant_resume(tenant=tenant)]
        self.message_user(request, f"Resumed {len(done)} workspace(s){': ' + ', '.join(done) if done else ''}.")

    @admin.display(description="tokens this month")
    def tokens_this_month(self, obj: Tenant) -> int:
        return tokens_spent_this_month(tenant=obj)

    def get_readonly_fields(self, request, obj=None):
        fields = [*super().get_readonly_fields(request, obj), "suspended_at"]  # changed by the actions
        if admin_tenant_ids(request.user) is not None:
            # The host sets the budget and the slug (config files and URLs refer to it).
            fields += ["slug", "monthly_token_budget"]
        return fields

    def save_model(self, request, obj, form, change) -> None:
        super().save_model(request, obj, form, change)
        if change and "timezone" in form.changed_data:
            tenant_retimed.send(sender=Tenant, tenant=obj)  # beats that follow the tenant's timezone

    def get_prepopulated_fields(self, request, obj=None):
        return {} if admin_tenant_ids(request.user) is not None else super().get_prepopulated_fields(request, obj)


class NewMemberForm(forms.ModelForm):
    """A tenant admin adds a person as a new account: they cannot see (or pick) the
    host's other users. The host adds existing accounts with the ordinary form."""

    username = forms.CharField(max_length=150, help_text="their sign-in name, new on this server")
    first_name = forms.CharField(max_length=150, required=False)
    email = forms.EmailField(required=False)
    password = forms.CharField(
        widget=forms.PasswordInput(render_value=False), required=False, strip=False,
        help_text="leave empty for someone who only writes from Telegram, WhatsApp, … (paired there)",
    )

    class Meta:
        model = Membership
        fields = ["tenant", "role"]

    def clean_username(self) -> str:
        username = self.cleaned_data["username"].strip()
        if get_user_model().objects.filter(username__iexact=username).exists():
            raise forms.ValidationError("That name is taken on this server: choose another, or ask the host to "
                                        "add the existing account.")
        return username

    def clean(self) -> dict:
        data = super().clean()
        if data.get("password"):
            user = get_user_model()(username=data.get("username", ""), first_name=data.get("first_name", ""),
                                    email=data.get("email", ""))
            try:
                validate_password(data["password"], user=user)
            except forms.ValidationError as exc:
                self.add_error("password", exc)
        return data

    def account_create(self) -> Any:
        """The new person's account (MembershipAdmin.save_model makes it with the membership)."""
        data = self.cleaned_data
        user = get_user_model()(username=data["username"], first_name=data.get("first_name", ""),
                                email=data.get("email", ""))
        if data.get("password"):
            user.set_password(data["password"])
        else:
            user.set_unusable_password()
        user.save()
        return user


@admin.register(Membership)
class MembershipAdmin(TenantScopedAdminMixin, admin.ModelAdmin):
    list_display = ["tenant", "user", "role", "timezone", "created_at"]
    list_filter = ["role", "tenant"]
    search_fields = ["user__username", "tenant__slug"]
    autocomplete_fields = ["user"]
    fixed_fields = ("user",)  # another person is another membership: removed, then added

    def get_form(self, request, obj=None, change=False, **kwargs):
        if obj is None and admin_tenant_ids(request.user) is not None:
            kwargs["form"] = NewMemberForm
            kwargs["fields"] = ["tenant", "username", "first_name", "email", "password", "role"]
        return super().get_form(request, obj, change=change, **kwargs)

    def get_fields(self, request, obj=None):
        if obj is None and admin_tenant_ids(request.user) is not None:
            return ["tenant", "username", "first_name", "email", "password", "role"]
        return super().get_fields(request, obj)

    # Owners are made and unmade by owners: a workspace admin manages members and admins.
    def _owns(self, request, tenant_id: int | None) -> bool:
        return owns_tenant(request.user, tenant_id)

    def has_change_permission(self, request, obj=None) -> bool:
        if obj is not None and obj.role == Membership.Role.OWNER and not self._owns(request, obj.tenant_id):
            return False
        return super().has_change_permission(request, obj)

    def has_delete_permission(self, request, obj=None) -> bool:
        if obj is not None and obj.role == Membership.Role.OWNER and not self._owns(request, obj.tenant_id):
            return False
        return super().has_delete_permission(request, obj)

    # Removing someone revokes their API tokens for the workspace (tenancy.services).
    def delete_model(self, request, obj) -> None:
        memberships_remove(memberships=Membership.objects.filter(pk=obj.pk))

    def delete_queryset(self, request, queryset) -> None:
        memberships_remove(memberships=queryset)

    def save_model(self, request, obj, form, change) -> None:
        if obj.role == Membership.Role.OWNER and not self._owns(request, obj.tenant_id):
            raise PermissionDenied("only an owner of the workspace makes someone an owner")
        if isinstance(form, NewMemberForm):
            self.check_tenant(request, obj)  # before the account is made
            with transaction.atomic():
                obj.user = form.account_create()
                obj.save()
            return
        super().save_model(request, obj, form, change)
        if not change or "timezone" in form.changed_data:
            # Their own beats: someone let back in keeps the beats they had, mirrored in the
            # zone they followed before they left.
            person_retimed.send(sender=Membership, tenant=obj.tenant, user=obj.user)


CLEAR_KEY = "-"  # typed into a key field: remove the stored key


class KeysWriteOnly(forms.ModelForm):
    """Model API keys are write-only: the form never shows one back; an empty field keeps
    the stored key, a new one replaces it, "-" removes it."""

    KEYS: tuple[str, ...] = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name in self.KEYS:
            field = self.fields.get(name)
            if field is None:
                continue
            field.widget = forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"})
            stored = bool(self.instance.pk and getattr(self.instance, name))
            field.help_text = (f"{'Set (hidden). Leave empty to keep it; type - to remove it. ' if stored else ''}"
                               f"{field.help_text}")

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        for name in self.KEYS:
            if name not in self.fields:
                continue
            typed = (cleaned.get(name) or "").strip()
            if typed == CLEAR_KEY:
                cleaned[name] = ""
            elif not typed and self.instance.pk:
                cleaned[name] = getattr(type(self.instance).objects.get(pk=self.instance.pk), name)
            else:
                cleaned[name] = typed
        return cleaned


class QorForm(KeysWriteOnly):
    KEYS = ("main_api_key", "summarizer_api_key", "heartbeat_api_key", "transcriber_api_key")


class ModelFallbackForm(KeysWriteOnly):
    KEYS = ("api_key",)


class ModelFallbackInline(admin.TabularInline):
    """Shown to the host's superusers only (model servers belong to the host)."""

    model = ModelFallback
    form = ModelFallbackForm
    extra = 0
    fields = ["role", "position", "base_url", "model", "num_ctx", "max_concurrency", "api_key", "cooldown"]
    readonly_fields = ["cooldown"]

    @admin.display(description="state")
    def cooldown(self, obj: ModelFallback) -> str:
        if not obj.pk:
            return "—"
        return route_state(base_url=obj.base_url, model=obj.model,
                           key=route_key(api_key=obj.api_key, base_url=obj.base_url))


class McpServerForm(KeysWriteOnly):
    KEYS = ("bearer_token",)
    host = False  # set per request: whether the host's superuser is editing

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        if not self.host:  # a stdio server is a command run on this server: the host's alone
            if cleaned.get("kind") == McpServer.Kind.STDIO or cleaned.get("command"):
                raise forms.ValidationError("Only the host's superusers add stdio MCP servers (they run a command "
                                            "on this server); a streamable HTTP server needs only its URL.")
        return cleaned


class McpServerInline(TenantScopedInlineMixin, admin.StackedInline):
    model = McpServer
    tenant_field = "qor__tenant"
    form = McpServerForm
    extra = 0
    fields = ["name", "kind", "url", "bearer_token", "command", "enabled", "min_trust", "listed"]
    readonly_fields = ["listed"]

    def get_formset(self, request, obj=None, **kwargs):
        formset = super().get_formset(request, obj, **kwargs)
        formset.form = type("McpServerFormFor", (formset.form,), {"host": request.user.is_superuser})
        return formset

    # A stdio server runs a command on the host, with the host's arguments (a key among
    # them): a tenant admin neither sees one nor can ask for one (no kind, no command: what
    # they add is a streamable HTTP server), and their page of the Qor saves whatever stdio
    # servers the host gave it.
    def get_queryset(self, request):
        servers = super().get_queryset(request)
        return servers if request.user.is_superuser else servers.exclude(kind=McpServer.Kind.STDIO)

    def get_fields(self, request, obj=None):
        fields = list(super().get_fields(request, obj))
        return fields if request.user.is_superuser else [f for f in fields if f not in ("kind", "command")]

    @admin.display(description="tools")
    def listed(self, obj: McpServer) -> str:
        if not obj.pk or obj.tools_listed_at is None:
            return "not listed yet (on the next turn)"
        names = ", ".join(t.get("name", "") for t in obj.tools) or "none"
        return f"{names} (listed {obj.tools_listed_at:%Y-%m-%d %H:%M})"


@admin.register(Qor)
class QorAdmin(TenantScopedAdminMixin, admin.ModelAdmin):
    form = QorForm
    list_display = ["slug", "name", "tenant", "is_default", "summarizer_mode", "main_model"]
    list_filter = ["tenant", "summarizer_mode"]
    search_fields = ["slug", "name"]
    fieldsets = [
        (None, {"fields": ["tenant", "name", "slug", "is_default", "route_states"]}),
        ("Prompt", {"fields": ["system_prompt", "project_context", "project_folder", "tool_allowlist"]}),
        ("Main model", {"fields": ["main_base_url", "main_model", "main_num_ctx", "main_vision",
                                   "main_max_concurrency", "main_api_key"]}),
        ("Summarizer", {"fields": ["summarizer_mode", "compact_threshold", "summarizer_base_url",
                                    "summarizer_model", "summarizer_num_ctx", "summarizer_max_concurrency",
                                    "summarizer_api_key"]}),
        ("Heartbeat model", {"fields": ["heartbeat_base_url", "heartbeat_model", "heartbeat_num_ctx",
                                        "heartbeat_max_concurrency", "heartbeat_api_key"]}),
        ("Voice notes", {"fields": ["transcriber_base_url", "transcriber_model", "transcriber_api_key"]}),
    ]
    # Keys are the host's too: never shown, and only superusers set them.
    KEY_FIELDS = QorForm.KEYS
    readonly_fields = ["route_states"]

    @admin.display(description="model servers now")
    def route_states(self, obj: Qor) -> str:
        """Each role's own model server and whether it is cooling down after failures (the
        fallbacks' state is in their list below)."""
        if obj is None or not obj.pk:
            return "—"
        lines = []
        for role in ("main", "summarizer", "heartbeat"):
            base_url, model, _ = obj.route_target(role)
            if model:  # the key its calls send: a rate limit or a refusal cools that key
                key = route_key(api_key=role_api_key(obj, role), base_url=base_url)
                lines.append(f"{role}: {model} — {route_state(base_url=base_url, model=model, key=key)}")
        return "; ".join(lines) or "offline (no model configured)"
    # Model servers belong to the host: only superusers point a Qor at one (see
    # qorven.llm.routes; the host's key never follows a URL a tenant admin chose). So does
    # the project folder: a path on the server (qorven.agent.project).
    HOST_FIELDS = ("main_base_url", "summarizer_base_url", "heartbeat_base_url", "transcriber_base_url",
                   "project_folder", "main_max_concurrency", "summarizer_max_concurrency", "heartbeat_max_concurrency")

    def get_readonly_fields(self, request, obj=None):
        # Its tenant is fixed once made (TenantScopedAdminMixin): a Qor's sessions, memories,
        # bindings and beats name that tenant, and would be answered with another's prompt,
        # context and MCP servers.
        fields = list(super().get_readonly_fields(request, obj))
        return fields if request.user.is_superuser else [*fields, *self.HOST_FIELDS]

    def get_fieldsets(self, request, obj=None):
        fieldsets = super().get_fieldsets(request, obj)
        if request.user.is_superuser:
            return fieldsets
        return [(name, {**options, "fields": [f for f in options["fields"] if f not in self.KEY_FIELDS]})
                for name, options in fieldsets]

    def get_inlines(self, request, obj):
        return [ModelFallbackInline, McpServerInline] if request.user.is_superuser else [McpServerInline]


@admin.register(ApiToken)
class ApiTokenAdmin(OwnerRankedAdminMixin, admin.ModelAdmin):
    list_display = ["prefix", "user", "tenant", "name", "created_at", "last_used_at", "expires_at", "revoked_at"]
    list_filter = ["tenant"]
    # Whose a token is, and that it was revoked, never change: a token moved onto another
    # member (an owner) would let whoever holds it act as them.
    readonly_fields = ["prefix", "digest", "tenant", "user", "created_at", "last_used_at", "revoked_at"]
    exclude: list[str] = []
    actions = ["revoke"]

    def get_readonly_fields(self, request, obj=None):
        fields = list(super().get_readonly_fields(request, obj))
        if obj is not None and obj.expires_at is not None and obj.expires_at <= timezone.now():
            # Run out, it is as dead as a revoked one: a new end would set it (leaked, say) going again.
            fields.append("expires_at")
        return fields

    def has_add_permission(self, request) -> bool:
        return False  # tokens are minted with `qorven token create`, which shows them once

    # An owner's tokens are the owner's (and the host's) to revoke, delete or re-date, as
    # the owner's membership is: a workspace admin revoking one shuts the owner's scripts
    # out, and one clearing its end keeps working for good a token the owner meant to run
    # out. The admin still sees them listed, read-only: which tokens the workspace has out
    # is theirs to know, and to raise with the owner.
    person_fields = ("user",)

    @admin.action(description="Revoke the selected tokens", permissions=["change"])
    def revoke(self, request, queryset):
        from .services import api_tokens_revoke

        live = list(queryset.filter(revoked_at__isnull=True).order_by().values_list("tenant_id", "user_id").distinct())
        off_limits = {tenant_id: owners_off_limits(request.user, tenant_id) for tenant_id, _ in live}
        if any(user_id in off_limits[tenant_id] for tenant_id, user_id in live):
            self.message_user(request, "Only an owner of the workspace revokes an owner's token: none was revoked. "
                                       "Choose the others again.", messages.ERROR)
            return
        revoked = api_tokens_revoke(tokens=queryset)
        self.message_user(request, f"Revoked {revoked} token(s).")


@admin.register(Usage)
class UsageAdmin(TenantScopedAdminMixin, admin.ModelAdmin):
    list_display = ["day", "tenant", "qor", "role", "route", "calls", "prompt_tokens", "completion_tokens"]
    list_filter = ["tenant", "role", "day"]
    date_hierarchy = "day"

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


class PluginSettingForm(forms.ModelForm):
    """The switch's name chosen from what exists: the registered tools and channels."""

    name = forms.ChoiceField()

    class Meta:
        model = PluginSetting
        fields = ["tenant", "kind", "name", "enabled"]

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        from .switches import switchable_channels
        from .tool_registry import registry

        self.tools, self.channels = sorted(registry.tools), sorted(switchable_channels)
        self.fields["name"].choices = [("Tools", [(n, n) for n in self.tools]),
                                       ("Channels", [(n, n) for n in self.channels])]
        self.fields["name"].help_text = "A tool for kind “tool”, a channel for kind “channel”."

    def clean(self):
        data = super().clean()
        kind, name = data.get("kind"), data.get("name")
        names = self.tools if kind == PluginSetting.Kind.TOOL else self.channels
        if kind and name and name not in names:
            self.add_error("name", f"“{name}” is not a {kind}; choose one of the {kind}s.")
        return data


@admin.register(PluginSetting)
class PluginSettingAdmin(TenantScopedAdminMixin, admin.ModelAdmin):
    form = PluginSettingForm
    list_display = ["tenant", "kind", "name", "enabled"]
    list_filter = ["kind", "enabled", "tenant"]
    list_editable = ["enabled"]
