"""The admin's workspace pages: a tenant, its members and its Qors inline, and the host's
suspend and resume."""
from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.forms.formsets import DELETION_FIELD_NAME

from ..admin_scoping import TenantScopedAdminMixin, TenantScopedInlineMixin, admin_tenant_ids, owns_tenant
from ..models import Membership, Qor, Tenant
from ..selectors import tokens_spent_this_month
from ..services import memberships_remove
from ..signals import tenant_retimed


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
            deleted = self.can_delete and form.cleaned_data.get(DELETION_FIELD_NAME, False)  # Django's _should_delete_form
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
        from ..services import tenant_suspend

        done = [tenant.slug for tenant in queryset if tenant_suspend(tenant=tenant)]
        self.message_user(request, f"Suspended {len(done)} workspace(s){': ' + ', '.join(done) if done else ''}. "
                                   "What platforms send them is kept, unanswered, until they are resumed.")

    @admin.action(description="Resume the selected workspaces")
    def resume(self, request, queryset) -> None:
        from ..services import tenant_resume

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
