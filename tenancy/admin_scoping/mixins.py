"""The mixins a ModelAdmin or an inline adopts to be scoped to the tenants its user
administers (see the package's docstring)."""
from __future__ import annotations

from typing import Any, cast

from django import forms
from django.contrib.admin.widgets import ForeignKeyRawIdWidget
from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied
from django.db.models import ForeignKey, Model, QuerySet
from django.http import HttpRequest

from ..models import Qor, Tenant
from .offered import ScopedRawIdWidget, current_offered, may_browse, offered_filters, offered_lookups, related_only
from .rights import admin_tenant_ids, linkable_people, owners_off_limits, tenant_chosen, tenant_id_of


class _Scoping:
    tenant_field = "tenant"
    model: type[Model]

    def scope(self, request: HttpRequest, qs: QuerySet) -> QuerySet:
        ids = admin_tenant_ids(request.user)
        if ids is None:
            return qs
        return qs.filter(**{f"{self.tenant_field}__in" if self.tenant_field else "pk__in": ids})

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return self.scope(request, super().get_queryset(request))  # type: ignore[misc]

    def formfield_for_foreignkey(self, db_field: ForeignKey, request: HttpRequest, **kwargs: Any):
        ids = admin_tenant_ids(request.user)
        # django-stubs allow "self" here, which the app registry has made the model by now.
        related = cast("type[Model]", db_field.related_model)
        if ids is not None and "queryset" not in kwargs:
            if related is Tenant:
                kwargs["queryset"] = Tenant.objects.filter(pk__in=ids)
            elif related is get_user_model():
                kwargs["queryset"] = related.objects.filter(memberships__tenant__in=ids).distinct()
            elif related is Qor or any(f.name == "tenant" for f in related._meta.fields):
                kwargs["queryset"] = related._default_manager.filter(tenant__in=ids)
        field = super().formfield_for_foreignkey(db_field, request, **kwargs)  # type: ignore[misc]
        if ids is not None and field is not None and type(field.widget) is ForeignKeyRawIdWidget:
            widget = field.widget
            if not may_browse(request, widget.admin_site, related):
                # Its lookup button opens the related model's list, which this admin is
                # refused (the server's accounts): a dead end beside a box that wants a
                # number they cannot find. They choose from the field's choices instead,
                # already narrowed to their tenants (a person: their members).
                field.widget = forms.Select()
                field.widget.choices = field.choices  # as ModelChoiceField sets its own widget's
                return field
            field.widget = ScopedRawIdWidget(widget.rel, widget.admin_site, field.queryset, widget.attrs,
                                             using=widget.db)
        return field

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest | None = None) -> bool:
        allowed = super().lookup_allowed(lookup, value, request)  # type: ignore[misc]
        if not allowed or request is None or admin_tenant_ids(request.user) is None:
            return allowed
        # Django lets a list be filtered by any of the model's own fields from the URL; for
        # a tenant admin that would answer yes or no about values the page hides (a host's
        # model key, a binding's credentials, a provider's error text), a character at a
        # time. They filter by what the page offers: its filters, its date drill-down, and
        # a related row or the row itself by id.
        return lookup in offered_lookups(self, request) or any(
            lookup.startswith(f"{name}__") for name in offered_filters(self, request))

    def get_autocomplete_fields(self, request: HttpRequest) -> list[str]:
        # Autocomplete asks the related model's admin, which knows nothing of tenants.
        if admin_tenant_ids(request.user) is not None:
            return []
        return list(super().get_autocomplete_fields(request))  # type: ignore[misc]


class TenantScopedAdminMixin(_Scoping):
    """For a ModelAdmin whose rows belong to a tenant (see the module docstring)."""

    #: May a tenant admin create / delete rows of this model? (Tenants themselves: no.)
    tenant_admin_can_add = True
    tenant_admin_can_delete = True
    #: Fields of a row that never change once it is made, besides its tenant (shown, not edited).
    fixed_fields: tuple[str, ...] = ()

    def get_readonly_fields(self, request: HttpRequest, obj: Model | None = None) -> list[str]:
        fields = list(super().get_readonly_fields(request, obj))  # type: ignore[misc]
        if obj is None:
            return fields
        # A row stays in the tenant it was made in, for the host too: moved by someone who
        # administers both, it would take what it carries (a member's tokens, a bot's
        # senders, a sender's chats) into the other while the rows around it still name the first.
        fixed = [self.tenant_field] if self.tenant_field and "__" not in self.tenant_field else []
        return fields + [name for name in (*fixed, *self.fixed_fields) if name not in fields]

    def get_form(self, request: HttpRequest, obj: Model | None = None, change: bool = False, **kwargs: Any) -> Any:
        form = super().get_form(request, obj, change=change, **kwargs)  # type: ignore[misc]
        if obj is not None and admin_tenant_ids(request.user) is not None:
            current_offered(form, obj)
        return form

    def _tenant_admin_allows(self, request: HttpRequest, obj: Model | None) -> bool:
        ids = admin_tenant_ids(request.user)
        if not ids:
            return False
        return obj is None or tenant_id_of(obj, self.tenant_field) in ids

    def has_module_permission(self, request: HttpRequest) -> bool:
        if admin_tenant_ids(request.user) is None:
            return super().has_module_permission(request)  # type: ignore[misc]
        return self._tenant_admin_allows(request, None)

    def has_view_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        if admin_tenant_ids(request.user) is None:
            return super().has_view_permission(request, obj)  # type: ignore[misc]
        return self._tenant_admin_allows(request, obj)

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        if admin_tenant_ids(request.user) is None:
            return super().has_change_permission(request, obj)  # type: ignore[misc]
        return self._tenant_admin_allows(request, obj)

    def has_add_permission(self, request: HttpRequest, *args: Any) -> bool:
        if admin_tenant_ids(request.user) is None:
            return super().has_add_permission(request, *args)  # type: ignore[misc]
        return self.tenant_admin_can_add and self._tenant_admin_allows(request, None)

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        if admin_tenant_ids(request.user) is None:
            return super().has_delete_permission(request, obj)  # type: ignore[misc]
        return self.tenant_admin_can_delete and self._tenant_admin_allows(request, obj)

    def get_list_filter(self, request: HttpRequest) -> list[Any]:
        filters = list(super().get_list_filter(request))  # type: ignore[misc]
        if admin_tenant_ids(request.user) is None:
            return filters
        # A plain foreign-key filter lists every row of the related table (every tenant's
        # name); offer only the values present in the scoped rows.
        return [related_only(self.model, f) for f in filters]

    def save_model(self, request: HttpRequest, obj: Model, form: Any, change: bool) -> None:
        self.check_tenant(request, obj)
        super().save_model(request, obj, form, change)  # type: ignore[misc]

    def check_tenant(self, request: HttpRequest, obj: Model) -> None:
        ids = admin_tenant_ids(request.user)
        if ids is not None and tenant_id_of(obj, self.tenant_field) not in ids:
            raise PermissionDenied("that row belongs to a tenant you do not administer")


class TenantScopedInlineMixin(_Scoping):
    """For an inline under a scoped parent: its rows and choices are narrowed the same way;
    the parent's admin decides access to the parent object."""

    def _allowed(self, request: HttpRequest) -> bool:
        ids = admin_tenant_ids(request.user)
        return ids is None or bool(ids)

    def has_view_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        if admin_tenant_ids(request.user) is None:
            return super().has_view_permission(request, obj)  # type: ignore[misc]
        return self._allowed(request)

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        if admin_tenant_ids(request.user) is None:
            return super().has_change_permission(request, obj)  # type: ignore[misc]
        return self._allowed(request)

    def has_add_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        if admin_tenant_ids(request.user) is None:
            return super().has_add_permission(request, obj)  # type: ignore[misc]
        return self._allowed(request)

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        if admin_tenant_ids(request.user) is None:
            return super().has_delete_permission(request, obj)  # type: ignore[misc]
        return self._allowed(request)



class OwnerRankedAdminMixin(TenantScopedAdminMixin):
    """For a scoped ModelAdmin whose rows act for a person (`person_fields`: a token's
    user, a sender's, a memory's; a beat's owner and recipient). A row for one of its
    tenant's owners is, to a workspace admin who is not an owner there, read-only: listed
    (what the workspace holds stays theirs to see and raise with the owner), never
    changed, deleted or given to someone else; and the owners are not among the people
    its fields offer. Changed by such an admin, it would let them write as the owner, or
    read what is meant for the owner. The host and the tenant's owners keep every right.
    A list action of the page leaves the owners' rows alone (`owners_rows_apart`)."""

    person_fields: tuple[str, ...] = ()

    def _people(self, obj: Model) -> set[int]:
        return {getattr(obj, f"{name}_id") for name in self.person_fields} - {None}

    def for_owner_off_limits(self, request: HttpRequest, obj: Model | None) -> bool:
        if obj is None:
            return False
        people = self._people(obj)
        return bool(people) and bool(people & owners_off_limits(request.user, tenant_id_of(obj, self.tenant_field)))

    def owners_rows_apart(self, request: HttpRequest, rows: Any) -> tuple[list[Any], list[Any]]:
        """`rows` (a list action's) split into those the admin may act on and the owners'."""
        off_limits: dict[int | None, frozenset[int]] = {}
        allowed: list[Any] = []
        owners: list[Any] = []
        for row in rows:
            tenant_id = tenant_id_of(row, self.tenant_field)
            if tenant_id not in off_limits:
                off_limits[tenant_id] = owners_off_limits(request.user, tenant_id)
            (owners if self._people(row) & off_limits[tenant_id] else allowed).append(row)
        return allowed, owners

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return not self.for_owner_off_limits(request, obj) and super().has_change_permission(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return not self.for_owner_off_limits(request, obj) and super().has_delete_permission(request, obj)

    def get_form(self, request: HttpRequest, obj: Model | None = None, change: bool = False, **kwargs: Any) -> Any:
        form = super().get_form(request, obj, change=change, **kwargs)
        tenants = admin_tenant_ids(request.user)
        if tenants is None:
            return form
        # The people offered are those the row's own workspace lets this admin tie it to:
        # its tenant's on its page, the chosen one's (or the admin's one workspace's) on the
        # add page. Cut by every workspace they administer, an admin of one who owns another
        # was not offered, on the other's rows, its members who own the first.
        tenant_id = tenant_id_of(obj, self.tenant_field) if obj is not None else tenant_chosen(request, tenants)
        people = linkable_people(request.user, [tenant_id] if tenant_id is not None else tenants)
        for name in self.person_fields:
            field = form.base_fields.get(name)
            if field is None:  # read-only here
                continue
            field.queryset = people
            if isinstance(field.widget, ScopedRawIdWidget):
                field.widget.queryset = people
        if obj is not None:
            current_offered(form, obj)  # a person who has since left, shown as the row's
        return form

    def check_tenant(self, request: HttpRequest, obj: Model) -> None:
        """Every save checks here (the admin's own `save_model`s too): a row is written in
        a tenant the admin administers and, by a workspace admin, never for its owners."""
        super().check_tenant(request, obj)
        if self.for_owner_off_limits(request, obj):
            raise PermissionDenied("only an owner of the workspace acts for an owner")
