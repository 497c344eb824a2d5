"""What Django's error report shows (the DEBUG page, and a report mailed or logged with
the settings): its own filter hides a setting or a request variable by its name (KEY,
SECRET, TOKEN, PASS…), and here a URL's user name and password too, whatever it is called —
QORVEN_OUTBOUND_PROXY, CELERY_BROKER_URL, a cache's LOCATION, or HTTPS_PROXY in the
environment a development server hands each request — shown as `***@` before the host."""
from __future__ import annotations

from typing import Any

from django.views.debug import SafeExceptionReporterFilter

from .environment import url_without_credentials


class CredentialsHidden(SafeExceptionReporterFilter):
    def cleanse_setting(self, key: Any, value: Any) -> Any:
        value = super().cleanse_setting(key, value)  # dicts and lists: this method again, for each item
        if isinstance(value, str) and "://" in value and "@" in value:
            return url_without_credentials(value)
        return value
