"""The admin of tenancy's models, one module per page family; importing the package
registers them all (Django's autodiscovery imports `tenancy.admin`). Apps above add their
own inlines to TenantAdmin."""
from __future__ import annotations

from . import members, qors, switches, tokens, usage, workspaces
from .members import MembershipAdmin, NewMemberForm
from .qors import CLEAR_KEY, KeysWriteOnly, McpServerInline, ModelFallbackInline, QorAdmin, QorForm
from .switches import PluginSettingAdmin, PluginSettingForm
from .tokens import ApiTokenAdmin
from .usage import UsageAdmin
from .workspaces import MembershipInline, QorInline, TenantAdmin

__all__ = [
    "CLEAR_KEY", "ApiTokenAdmin", "KeysWriteOnly", "McpServerInline", "MembershipAdmin", "MembershipInline",
    "ModelFallbackInline", "NewMemberForm", "PluginSettingAdmin", "PluginSettingForm", "QorAdmin", "QorForm",
    "QorInline", "TenantAdmin", "UsageAdmin", "members", "qors", "switches", "tokens", "usage", "workspaces",
]
