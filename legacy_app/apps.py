from __future__ import annotations

from django.apps import AppConfig


class LegacyAppConfig(AppConfig):
    """The migration tools from per-channel installs: `import-legacy` and
    `collapse-sessions`. They read conversations and write memories, so they sit above
    both stores and neither store imports them."""

    name = "legacy_app"
    verbose_name = "Migration tools"
