"""What a tenant admin's page offers: a raw id field that names only the rows among its
choices, a row's own value kept among them, and the lookups and filters its URL may use."""
from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.admin.widgets import ForeignKeyRawIdWidget
from django.core.exceptions import FieldDoesNotExist, ValidationError
from django.db.models import ForeignKey, Model, Q, QuerySet
from django.http import HttpRequest


def may_browse(request: HttpRequest, admin_site: Any, model: type[Model]) -> bool:
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


def current_offered(form: Any, obj: Model) -> None:
    """A row's own value of a narrowed choice field stays among the choices of its change
    page (`form` a class per request: ModelAdmin.get_form builds one each time): a person
    who has since left the workspace, an anonymous webchat visitor. Left out, it could not
    be shown chosen, and the browser posted the first choice ("---------") in its place."""
    for name, field in form.base_fields.items():
        if not isinstance(field, forms.ModelChoiceField) or isinstance(field, forms.ModelMultipleChoiceField):
            continue
        current, narrowed = getattr(obj, f"{name}_id", None), field.queryset
        if current is None or narrowed is None or narrowed.filter(pk=current).exists():
            continue
        # Not `queryset | …`: the narrowed one may be distinct, which Django does not combine.
        field.queryset = narrowed.model._default_manager.filter(Q(pk__in=narrowed.values("pk")) | Q(pk=current))
        if isinstance(field.widget, ScopedRawIdWidget):
            field.widget.queryset = field.queryset


def offered_filters(model_admin: Any, request: HttpRequest) -> set[str]:
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


def offered_lookups(model_admin: Any, request: HttpRequest) -> set[str]:
    """Lookups of a row, or of a related row, by id (the links between admin pages), and
    the simple filters' own parameters."""
    lookups = {item.parameter_name for item in model_admin.get_list_filter(request)
               if isinstance(item, type) and issubclass(item, admin.SimpleListFilter) and item.parameter_name}
    for field in model_admin.model._meta.concrete_fields:
        if field.primary_key:
            names = [field.name, "pk"]
        elif isinstance(field, ForeignKey):
            names = [field.name, field.attname, f"{field.name}__{field.target_field.name}", f"{field.name}__pk"]
        else:
            continue
        lookups.update(f"{name}{suffix}" for name in names for suffix in ("", "__exact", "__in", "__isnull"))
    return lookups


def related_only(model: type[Model], entry: Any) -> Any:
    if isinstance(entry, str) and "__" not in entry:
        try:
            field = model._meta.get_field(entry)
        except FieldDoesNotExist:
            return entry
        if field.is_relation and field.many_to_one:
            return (entry, admin.RelatedOnlyFieldListFilter)
    return entry
