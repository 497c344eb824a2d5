"""The admin's binding form: each platform's credentials as fields of their own, with the
hints `qorven bind <channel> --help` gives, instead of raw JSON.

Secrets (tokens, signing secrets) are write-only: an empty field keeps the stored value and
the page only says whether one is set. Other values (ids, addresses, origins) are shown.
The lookup key the webhooks find the binding by is derived from the credentials, as
`qorven bind` derives it, never typed. New credentials are saved only once the platform
confirms they control that account (`Adapter.account_proof`); a tenant admin has no way
round it.
"""
from __future__ import annotations

from functools import cache
from typing import Any

from django import forms

from .models import ChannelBinding


def is_secret(name: str) -> bool:
    return name.endswith(("token", "secret"))


def field_name(kind: str, name: str) -> str:
    return f"cred_{kind}_{name}"


def credential_fields(kind: str) -> list[str]:
    from .adapters import ADAPTERS

    return [field_name(kind, name) for name in ADAPTERS[kind].credentials]


def kind_label(kind: str) -> str:
    return ChannelBinding.Kind(kind).label


class _BindingFormBase(forms.ModelForm):
    class Meta:
        model = ChannelBinding
        fields = ["tenant", "qor", "kind", "name", "unpaired_response", "group_answers", "enabled"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        from .adapters import ADAPTERS

        super().__init__(*args, **kwargs)
        stored = dict(self.instance.credentials or {}) if self.instance.pk else {}
        for kind, adapter in ADAPTERS.items():
            for name in adapter.credentials:
                field = self.fields.get(field_name(kind, name))
                if field is None or kind != self.instance.kind or not stored.get(name):
                    continue
                if is_secret(name):
                    field.help_text = f"Set (hidden). Leave empty to keep it. {field.help_text}"
                else:
                    field.initial = stored[name]
        if self.instance.pk and "kind" in self.fields:
            self.fields["kind"].disabled = True  # another platform is another binding

    def clean(self) -> dict[str, Any]:
        from .adapters import ADAPTERS

        data = super().clean()
        # On a change page the tenant is read-only: the binding's own.
        tenant = data.get("tenant") or (self.instance.tenant if self.instance.tenant_id else None)
        qor, kind = data.get("qor"), data.get("kind") or self.instance.kind
        if tenant is not None and qor is not None and qor.tenant_id != tenant.pk:
            self.add_error("qor", "This Qor belongs to another tenant.")
        adapter = ADAPTERS.get(kind or "")
        if adapter is None:
            return data
        stored = dict(self.instance.credentials or {}) if self.instance.pk else {}
        given = {name: (data.get(field_name(kind, name)) or "").strip() for name in adapter.credentials}
        merged = {**stored, **{k: v for k, v in given.items() if v or not is_secret(k)}}
        merged = {k: v for k, v in merged.items() if v}
        for name in adapter.required:
            if not merged.get(name):
                self.add_error(field_name(kind, name), f"{kind_label(kind)} needs this.")
        if self.errors:
            return data
        clean = adapter.prepare_credentials(merged)
        problem = adapter.credentials_problem(clean)
        if problem:
            name, what = problem
            self.add_error(field_name(kind, name), f"The {name.replace('_', ' ')} {what}.")
            return data
        if clean != stored:
            # Asked before anything is said about who has the account: the platform's word
            # that these credentials control it, or a refusal that is the same whoever has it.
            unproven = adapter.account_proof(clean)
            if unproven:
                self.add_error(None, unproven.text)
                return data
        lookup = adapter.lookup_key(clean)
        taken = ChannelBinding.objects.filter(kind=kind, lookup_key=lookup).exclude(pk=self.instance.pk)
        if taken.exists():
            self.add_error(None, f"That {kind_label(kind)} account is already bound to a Qor.")
        self._credentials, self._lookup = clean, lookup
        return data

    def save(self, commit: bool = True) -> ChannelBinding:
        from .adapters import adapter_for

        binding = super().save(commit=False)
        binding.credentials, binding.lookup_key = self._credentials, self._lookup
        adapter = adapter_for(binding.kind)
        binding.verify_key = adapter.verify_key(binding.credentials) if adapter is not None else ""
        if not binding.name:
            binding.name = binding.kind
        if commit:
            binding.save()
        return binding


def _credential_form_fields() -> dict[str, forms.Field]:
    from .adapters import ADAPTERS

    fields: dict[str, forms.Field] = {}
    for kind, adapter in ADAPTERS.items():
        for name, hint in adapter.credentials.items():
            widget = forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}) \
                if is_secret(name) else forms.TextInput(attrs={"size": 60})
            required = " Required." if name in adapter.required else ""
            fields[field_name(kind, name)] = forms.CharField(
                label=name.replace("_", " "), required=False, widget=widget, help_text=hint[:1].upper() + hint[1:]
                + "." + required,
            )
    return fields


@cache
def binding_form() -> type[forms.ModelForm]:
    """The form, built the first time the admin reads it: its fields come from the adapters,
    which are not imported as the admin is registered (every command does that, at start)."""
    form = type("BindingForm", (_BindingFormBase,), _credential_form_fields())
    form.__doc__ = __doc__
    return form


class BindingFormOnRead:
    """`ModelAdmin.form` that is `binding_form()` when read."""

    def __get__(self, admin: object, owner: type | None = None) -> type[forms.ModelForm]:
        return binding_form()
