"""The admin's membership pages: who is in a workspace with which role, a new person's
account made with their membership, and owners made and unmade by owners alone."""
from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import PermissionDenied
from django.db import transaction

from ..admin_scoping import TenantScopedAdminMixin, admin_tenant_ids, owns_tenant
from ..models import Membership
from ..services import memberships_remove
from ..signals import person_retimed


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

    def clean(self) -> dict[str, Any]:
        super().clean()
        data = self.cleaned_data
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
