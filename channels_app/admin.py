from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.template.response import TemplateResponse

from tenancy.admin import TenantAdmin
from tenancy.admin_scoping import (
    OwnerRankedAdminMixin,
    TenantScopedAdminMixin,
    TenantScopedInlineMixin,
    owners_off_limits,
)
from tenancy.errors import NotFound
from tenancy.models import Membership

from .admin_binding import BindingFormOnRead, credential_fields, kind_label
from .models import ChannelBinding, Identity, InboundEvent, OutboundDelivery, PairingRequest
from .pairing import DECIDABLE, pairing_approve, pairing_deny, tenant_members
from .pairing_end import identity_pairing_end, speaks_for
from .platforms import PLATFORMS


class BindingRowForm(forms.ModelForm):
    """A binding as a row of its tenant's page: its Qor is one of that tenant's, as on the
    binding's own page (admin_binding.binding_form)."""

    def clean(self):
        data = super().clean()
        qor = data.get("qor")
        if qor is not None and qor.tenant_id != self.instance.tenant_id:  # the page's tenant, set by the formset
            self.add_error("qor", "This Qor belongs to another tenant.")
        return data


class IdentityForm(forms.ModelForm):
    class Meta:
        model = Identity
        fields = "__all__"

    def clean(self):
        data = super().clean()
        tenant, user = data.get("tenant") or getattr(self.instance, "tenant", None), data.get("user")
        # A sender is linked to a member of its own tenant: anyone else is refused on every
        # message it sends, and is none of that tenant's to name. One linked before leaving
        # may stay so while the rest of the row is edited (ending that pairing is the admin's).
        if (tenant is not None and user is not None and {"tenant", "user"} & set(self.changed_data)
                and not Membership.objects.filter(tenant=tenant, user=user).exists()):
            self.add_error("user", "This user is not a member of the tenant.")
        return data


class ChannelBindingInline(TenantScopedInlineMixin, admin.TabularInline):
    """A tenant's channel accounts, at a glance. Credentials and webhook secrets are never
    rendered, only how many are set; they are entered on the binding's own page (a field
    with a hint for each) or with `qorven bind`."""

    model = ChannelBinding
    form = BindingRowForm
    extra = 0
    fields = ["kind", "name", "qor", "enabled", "secrets"]
    readonly_fields = ["kind", "secrets"]
    show_change_link = True

    def has_add_permission(self, request, obj=None) -> bool:
        return False  # a new binding needs its platform's credentials: the binding's own add page

    @admin.display(description="credentials")
    def secrets(self, obj: ChannelBinding) -> str:
        keys = len(obj.credentials or {})
        return f"{keys} set (hidden)" if keys else "none"


TenantAdmin.inlines = [*TenantAdmin.inlines, ChannelBindingInline]  # shown on the tenant's page


@admin.register(ChannelBinding)
class ChannelBindingAdmin(TenantScopedAdminMixin, admin.ModelAdmin):
    form = BindingFormOnRead()
    list_display = ["__str__", "tenant", "qor", "kind", "enabled", "unpaired_response", "group_answers", "credential_keys"]
    list_filter = ["kind", "enabled", "tenant"]
    readonly_fields = ["credential_keys", "embed", "lookup_key"]

    def get_fieldsets(self, request, obj=None):
        main = (None, {"fields": ["tenant", "qor", "kind", "name", "unpaired_response", "group_answers", "enabled"]})
        if obj is None:  # one section per platform; only the chosen kind's is read
            return [main] + [
                (f"{kind_label(kind)} credentials", {
                    "fields": credential_fields(kind), "classes": ["collapse"],
                    "description": f"Only read when the kind above is {kind_label(kind)}.",
                }) for kind in PLATFORMS
            ]
        sections = [main, (f"{kind_label(obj.kind)} credentials", {
            "fields": credential_fields(obj.kind) + ["credential_keys", "lookup_key"],
            "description": "Secrets are never shown: leave a secret empty to keep it.",
        })]
        if obj.kind == ChannelBinding.Kind.WEBCHAT:
            sections.append(("Embed", {"fields": ["embed"]}))
        return sections

    @admin.display(description="credentials set")
    def credential_keys(self, obj: ChannelBinding) -> str:
        return ", ".join(sorted(k for k, v in (obj.credentials or {}).items() if v)) or "—"

    @admin.display(description="embed on your site")
    def embed(self, obj: ChannelBinding) -> str:
        """A webchat's script tag, to copy (escaped by the admin: shown, never run)."""
        if obj.pk is None or obj.kind != "webchat":
            return "—"
        from .adapters.webchat import embed_snippet

        return embed_snippet(obj)


@admin.register(Identity)
class IdentityAdmin(OwnerRankedAdminMixin, admin.ModelAdmin):
    form = IdentityForm
    list_display = ["__str__", "external_id", "tenant", "display_name", "user", "trust_level", "approval",
                    "updated_at"]
    list_filter = ["channel", "approval", "trust_level", "tenant"]
    search_fields = ["external_id", "display_name", "user__username"]
    raw_id_fields = ["user"]

    # A workspace admin never links a sender to an owner, nor changes an owner's sender:
    # either would let them write as the owner, or read what the owner writes.
    person_fields = ("user",)

    def save_model(self, request, obj, form, change) -> None:
        before = Identity.objects.filter(pk=obj.pk).first() if change else None
        super().save_model(request, obj, form, change)  # refused for an owner (see person_fields)
        if before is not None and speaks_for(before, before.user_id) and not speaks_for(obj, before.user_id):
            identity_pairing_end(identity=before, user_id=before.user_id)

    def delete_model(self, request, obj) -> None:
        super().delete_model(request, obj)
        if speaks_for(obj, obj.user_id):
            identity_pairing_end(identity=obj, user_id=obj.user_id)

    def delete_queryset(self, request, queryset) -> None:
        ended = [identity for identity in queryset if speaks_for(identity, identity.user_id)]
        super().delete_queryset(request, queryset)
        for identity in ended:
            identity_pairing_end(identity=identity, user_id=identity.user_id)


@admin.register(PairingRequest)
class PairingRequestAdmin(TenantScopedAdminMixin, admin.ModelAdmin):
    """The owner approves pairing here. A tenant admin's list is their tenants' requests, and
    the actions only ever receive rows from that list."""

    list_display = ["code", "channel", "external_id", "tenant", "state", "expires_at", "attempts", "decided_by",
                    "decided_at"]
    list_filter = ["state", "channel", "tenant"]
    readonly_fields = [f.name for f in PairingRequest._meta.fields]
    actions = ["approve_as_me", "approve_linking", "approve", "deny"]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False  # a request is decided by the actions, never edited (no Save button)

    def has_decide_permission(self, request) -> bool:
        """Who may approve or deny: whoever could change these rows (a tenant admin: their
        own tenants' requests; anyone else: Django's change permission)."""
        return super().has_change_permission(request)

    @admin.action(description="Approve as a new user (one is made for each sender)", permissions=["decide"])
    def approve(self, request, queryset):
        self._decide(request, queryset, approve=True)

    @admin.action(description="Approve, linking the sender to my own account", permissions=["decide"])
    def approve_as_me(self, request, queryset):
        """The usual case: the owner pairs their own Telegram (WhatsApp, …) with their account."""
        mine = set(Membership.objects.filter(user=request.user).values_list("tenant_id", flat=True))
        foreign = queryset.exclude(tenant_id__in=mine)
        if foreign.exists():
            self.message_user(request, "You are not a member of every selected request's workspace: "
                              "approve those as a new user, or link them to a member.", messages.ERROR)
            return
        self._decide(request, queryset, approve=True, user=request.user)

    @admin.action(description="Approve, linking the sender to a member…", permissions=["decide"])
    def approve_linking(self, request, queryset):
        """Asks which member (of the requests' one workspace), then approves."""
        pending = list(queryset.filter(state__in=DECIDABLE).select_related("tenant", "identity"))
        if not pending:
            self.message_user(request, "None of the selected requests is pending.", messages.WARNING)
            return None
        if len({p.tenant_id for p in pending}) > 1:
            self.message_user(request, "Choose requests of one workspace to link them to a member.", messages.ERROR)
            return None
        tenant = pending[0].tenant
        off_limits = owners_off_limits(request.user, tenant.pk)  # see IdentityAdmin
        members = [m for m in tenant_members(tenant=tenant) if m.pk not in off_limits]
        chosen = request.POST.get("member")
        if chosen is not None:
            user = next((m for m in members if str(m.pk) == chosen), None)
            if user is None:  # not a member of this workspace (or no longer)
                self.message_user(request, "Choose a member of the workspace.", messages.ERROR)
                return None
            self._decide(request, queryset.filter(pk__in=[p.pk for p in pending]), approve=True, user=user)
            return None
        return TemplateResponse(request, "admin/channels_app/pairingrequest/link.html", {
            **self.admin_site.each_context(request),
            "title": "Link senders to a member",
            "opts": self.model._meta,
            "pending": pending,
            "tenant": tenant,
            "members": members,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        })

    @admin.action(description="Deny", permissions=["decide"])
    def deny(self, request, queryset):
        self._decide(request, queryset, approve=False)

    def _decide(self, request, queryset, *, approve: bool, user=None) -> None:
        done = 0
        for pairing in queryset.filter(state__in=DECIDABLE).select_related("tenant"):
            try:
                if approve:
                    pairing_approve(tenant=pairing.tenant, code=pairing.code, user=user, by=request.user,
                                    via="admin")
                else:
                    pairing_deny(tenant=pairing.tenant, code=pairing.code, by=request.user, via="admin")
                done += 1
            except NotFound:
                self.message_user(request, f"{pairing.code} has expired", messages.WARNING)
        self.message_user(request, f"{'Approved' if approve else 'Denied'} {done} request(s).")


@admin.register(InboundEvent)
class InboundEventAdmin(TenantScopedAdminMixin, admin.ModelAdmin):
    # The record that recognises a platform's retry: deleting it would let the retry in again.
    tenant_admin_can_delete = False
    list_display = ["external_id", "binding", "tenant", "state", "result", "created_at"]
    list_filter = ["state", "result"]
    readonly_fields = [f.name for f in InboundEvent._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False


@admin.register(OutboundDelivery)
class OutboundDeliveryAdmin(TenantScopedAdminMixin, admin.ModelAdmin):
    # The record that keeps a reply from being sent twice.
    tenant_admin_can_delete = False
    list_display = ["message", "part", "binding", "state", "attempts", "sent_at", "last_error"]
    list_filter = ["state"]
    readonly_fields = [f.name for f in OutboundDelivery._meta.fields]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False
