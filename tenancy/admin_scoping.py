"""Tenant scoping for the Django admin.

Superusers (the host) see everything, as usual. A *tenant admin* — a staff user who is not
a superuser and holds an owner or admin Membership — sees and edits only the rows of the
tenants they administer: lists, change pages, foreign-key choices and list filters are
all narrowed to those tenants, and a row of another tenant is "not found", exactly like a
missing one. For such users, access to scoped models comes from the membership role, not
from Django model permissions; models that do not adopt the mixin keep Django's
permission checks (so a tenant admin does not see them unless granted). Once a row is
made, its tenant (and a model's `fixed_fields`) is shown on its change page, not edited, for
the host too. A field that takes a row's id offers a tenant admin the field's choices instead
when the list its lookup button opens is refused to them (the server's accounts).

Adopt it by putting `TenantScopedAdminMixin` (or `TenantScopedInlineMixin`) before
`admin.ModelAdmin` and setting `tenant_field` to the path from the model to its Tenant.
"""
from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.admin.widgets import ForeignKeyRawIdWidget
from django.contrib.auth import get_user_model
from django.core.exceptions import FieldDoesNotExist, PermissionDenied, ValidationError
from django.db.models import ForeignKey, Model, Q, QuerySet
from django.http import HttpRequest

from .models import Membership, Qor, Tenant

ADMIN_ROLES = (Membership.Role.OWNER, Membership.Role.ADMIN)
_CACHE = "_qorven_admin_tenant_ids"


def admin_tenant_ids(user: Any) -> frozenset[int] | None:
    """The tenants `user` may administer in the admin: None means all (a superuser)."""
    if not getattr(user, "is_active", False) or not getattr(user, "is_staff", False):
        return frozenset()
    if user.is_superuser:
        return None
    cached = getattr(user, _CACHE, None)
    if cached is None:
        cached = frozenset(
            # A workspace the host suspended is administered by the host alone until resumed.
            Membership.objects.filter(user=user, role__in=ADMIN_ROLES, tenant__suspended_at__isnull=True)
            .values_list("tenant_id", flat=True)
        )
        setattr(user, _CACHE, cached)  # per request: the user object lives as long as the request
    return cached


def owns_tenant(actor: Any, tenant_id: int | None) -> bool:
    """Whether `actor` may make, change or remove the tenant's owners in the admin: the
    host, and the tenant's owners (a workspace admin manages members and admins only)."""
    if admin_tenant_ids(actor) is None:
        return True
    return Membership.objects.filter(tenant_id=tenant_id, user=actor, role=Membership.Role.OWNER).exists()


def owners_off_limits(actor: Any, tenant_id: int) -> frozenset[int]:
    """The owners of the tenant `actor` may not act for in the admin (link a sender to,
    change the sender of): none for the host and for the tenant's owners; every owner for
    a workspace admin, who manages members and admins but is not an owner."""
    if admin_tenant_ids(actor) is None:
        return frozenset()
    owners = frozenset(Membership.objects.filter(tenant_id=tenant_id, role=Membership.Role.OWNER)
                       .values_list("user_id", flat=True))
    return frozenset() if actor.pk in owners else owners



def linkable_people(actor: Any, tenant_ids: Any) -> QuerySet:
    """The people `actor` may tie a row of one of `tenant_ids` to in the admin (link a
    sender to, give a memory or a beat to): its members, but for a workspace admin who is
    not an owner there, its owners."""
    allowed = Q(pk__in=[])
    for tenant_id in tenant_ids:
        allowed |= Q(memberships__tenant_id=tenant_id) & ~Q(pk__in=owners_off_limits(actor, tenant_id))
    return get_user_model().objects.filter(allowed).distinct()


def tenant_chosen(request: HttpRequest, tenants: frozenset[int]) -> int | None:
    """The workspace of the row an add page makes, when it is known: the one posted or put
    in the page's address (of those `tenants` the admin administers), else their only one."""
    raw = (request.POST if request.method == "POST" else request.GET).get("tenant")
    if not raw:
        return next(iter(tenants)) if len(tenants) == 1 else None
    try:
        tenant_id = int(raw)
    except (TypeError, ValueError):
        return None
    return tenant_id if tenant_id in tenants else None

def _tenant_id_of(obj: Model, tenant_field: str) -> int | None:
    if not tenant_field:
        return obj.pk
    *path, last = tenant_field.split("__")
    for step in path:
        obj = getattr(obj, step, None)
        if obj is None:
            return None
    return getattr(obj, f"{last}_id", None)


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
        if ids is not None and "queryset" not in kwargs:
            related = db_field.related_model
            if related is Tenant:
                kwargs["queryset"] = Tenant.objects.filter(pk__in=ids)
            elif related is get_user_model():
                kwargs["queryset"] = related.objects.filter(memberships__tenant__in=ids).distinct()
            elif related is Qor or any(f.name == "tenant" for f in related._meta.fields):
                kwargs["queryset"] = related._default_manager.filter(tenant__in=ids)
        field = super().formfield_for_foreignkey(db_field, request, **kwargs)  # type: ignore[misc]
        if ids is not None and field is not None and type(field.widget) is ForeignKeyRawIdWidget:
            widget = field.widget
            if not _may_browse(request, widget.admin_site, db_field.related_model):
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
        return lookup in _offered_lookups(self, request) or any(
            lookup.startswith(f"{name}__") for name in _offered_filters(self, request))

    def get_autocomplete_fields(self, request: HttpRequest) -> list[str]:
        # Autocomplete asks the related model's admin, which knows nothing of tenants.
        if admin_tenant_ids(request.user) is not None:
            return []
        return list(super().get_autocomplete_fields(request))  # type: ignore[misc]


def _may_browse(request: HttpRequest, admin_site: Any, model: type[Model]) -> bool:
    """Whether the admin's list of `model`, which a raw id field's lookup opens, is open to
    the request's user."""
    model_admin = admin_site._registry.get(model)
    return model_admin is not None and model_admin.has_view_permission(request)


class ScopedRawIdWidget(ForeignKeyRawIdWidget):
    """A raw id field that names the row it holds only when that row is one of the field's
    choices. Django's looks the id up in the whole table, so an id typed, posted back or
    put in the page's URL (`add/?user=3`) showed any row's name beside the field: the
    username of any account on the server, another tenant's session."""

    def __init__(self, rel: Any, admin_site: Any, queryset: QuerySet, attrs: Any = None, using: Any = None) -> None:
        super().__init__(rel, admin_site, attrs, using)
        self.queryset = queryset

    def label_and_url_for_value(self, value: Any) -> tuple[str, str]:
        try:
            offered = self.queryset.filter(**{self.rel.get_related_field().name: value}).exists()
        except (TypeError, ValueError, ValidationError):
            offered = False
        return super().label_and_url_for_value(value) if offered else ("", "")


def _current_offered(form: Any, obj: Model) -> None:
    """A row's own value of a narrowed choice field stays among the choices of its change
    page (`form` a class per request: ModelAdmin.get_form builds one each time): a person
    who has since left the workspace, an anonymous webchat visitor. Left out, it could not
    be shown chosen, and the browser posted the first choice ("---------") in its place."""
    for name, field in form.base_fields.items():
        if not isinstance(field, forms.ModelChoiceField) or isinstance(field, forms.ModelMultipleChoiceField):
            continue
        current = getattr(obj, f"{name}_id", None)
        if current is None or field.queryset.filter(pk=current).exists():
            continue
        # Not `queryset | …`: the narrowed one may be distinct, which Django does not combine.
        field.queryset = field.queryset.model._default_manager.filter(
            Q(pk__in=field.queryset.values("pk")) | Q(pk=current))
        if isinstance(field.widget, ScopedRawIdWidget):
            field.widget.queryset = field.queryset


def _offered_filters(model_admin: Any, request: HttpRequest) -> set[str]:
    """The field paths a list's filters and date drill-down filter by."""
    names = {model_admin.date_hierarchy} if model_admin.date_hierarchy else set()
    for item in model_admin.get_list_filter(request):
        if isinstance(item, type) and issubclass(item, admin.SimpleListFilter):
            names.add(item.parameter_name)
        elif isinstance(item, (list, tuple)):
            names.add(item[0])
        else:
            names.add(item)
    return names


def _offered_lookups(model_admin: Any, request: HttpRequest) -> set[str]:
    """Lookups of a row, or of a related row, by id (the links between admin pages), and
    the simple filters' own parameters."""
    lookups = {name for item in model_admin.get_list_filter(request)
               if isinstance(item, type) and issubclass(item, admin.SimpleListFilter)
               for name in (item.parameter_name,)}
    for field in model_admin.model._meta.concrete_fields:
        if field.primary_key:
            names = [field.name, "pk"]
        elif isinstance(field, ForeignKey):
            names = [field.name, field.attname, f"{field.name}__{field.target_field.name}", f"{field.name}__pk"]
        else:
            continue
        lookups.update(f"{name}{suffix}" for name in names for suffix in ("", "__exact", "__in", "__isnull"))
    return lookups


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
            _current_offered(form, obj)
        return form

    def _tenant_admin_allows(self, request: HttpRequest, obj: Model | None) -> bool:
        ids = admin_tenant_ids(request.user)
        if not ids:
            return False
        return obj is None or _tenant_id_of(obj, self.tenant_field) in ids

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
        return [_related_only(self.model, f) for f in filters]

    def save_model(self, request: HttpRequest, obj: Model, form: Any, change: bool) -> None:
        self.check_tenant(request, obj)
        super().save_model(request, obj, form, change)  # type: ignore[misc]

    def check_tenant(self, request: HttpRequest, obj: Model) -> None:
        ids = admin_tenant_ids(request.user)
        if ids is not None and _tenant_id_of(obj, self.tenant_field) not in ids:
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


def _related_only(model: type[Model], entry: Any) -> Any:
    if isinstance(entry, str) and "__" not in entry:
        try:
            field = model._meta.get_field(entry)
        except FieldDoesNotExist:
            return entry
        if field.is_relation and field.many_to_one:
            return (entry, admin.RelatedOnlyFieldListFilter)
    return entry



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
        return bool(people) and bool(people & owners_off_limits(request.user, _tenant_id_of(obj, self.tenant_field)))

    def owners_rows_apart(self, request: HttpRequest, rows: Any) -> tuple[list[Any], list[Any]]:
        """`rows` (a list action's) split into those the admin may act on and the owners'."""
        off_limits: dict[int | None, frozenset[int]] = {}
        allowed, owners = [], []
        for row in rows:
            tenant_id = _tenant_id_of(row, self.tenant_field)
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
        tenant_id = _tenant_id_of(obj, self.tenant_field) if obj is not None else tenant_chosen(request, tenants)
        people = linkable_people(request.user, [tenant_id] if tenant_id is not None else tenants)
        for name in self.person_fields:
            field = form.base_fields.get(name)
            if field is None:  # read-only here
                continue
            field.queryset = people
            if isinstance(field.widget, ScopedRawIdWidget):
                field.widget.queryset = people
        if obj is not None:
            _current_offered(form, obj)  # a person who has since left, shown as the row's
        return form

    def check_tenant(self, request: HttpRequest, obj: Model) -> None:
        """Every save checks here (the admin's own `save_model`s too): a row is written in
        a tenant the admin administers and, by a workspace admin, never for its owners."""
        super().check_tenant(request, obj)
        if self.for_owner_off_limits(request, obj):
            raise PermissionDenied("only an owner of the workspace acts for an owner")
