"""Posting an admin change page back as the browser would: the data of the form it served."""
from __future__ import annotations

from typing import Any


def served_form(response: Any) -> dict[str, Any]:
    """The fields of a change page's form and of its inlines (with their management
    forms), with the values the page was served with."""
    form = response.context["adminform"].form
    data = {form[name].html_name: _value(form[name].value()) for name in form.fields}
    for inline in response.context["inline_admin_formsets"]:
        management = inline.formset.management_form
        data.update({management[name].html_name: management[name].value() for name in management.fields})
        for each in inline.formset.forms:
            data.update({each[name].html_name: _value(each[name].value()) for name in each.fields})
    return data


def _value(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "on" if value else ""
    return value
