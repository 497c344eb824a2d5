"""The admin's on/off switches of a workspace's tools and channels."""
from __future__ import annotations

from typing import cast

from django import forms
from django.contrib import admin

from ..admin_scoping import TenantScopedAdminMixin
from ..models import PluginSetting


class PluginSettingForm(forms.ModelForm):
    """The switch's name chosen from what exists: the registered tools and channels."""

    name = forms.ChoiceField()

    class Meta:
        model = PluginSetting
        fields = ["tenant", "kind", "name", "enabled"]

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        from ..switches import switchable_channels
        from ..tool_registry import registry

        self.tools, self.channels = sorted(registry.tools), sorted(switchable_channels)
        name = cast(forms.ChoiceField, self.fields["name"])  # the field declared above
        name.choices = [("Tools", [(n, n) for n in self.tools]), ("Channels", [(n, n) for n in self.channels])]
        name.help_text = "A tool for kind “tool”, a channel for kind “channel”."

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
