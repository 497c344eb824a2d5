"""How Qorven reads its environment: django-environ, with every malformed or out-of-range
value named in one line (ImproperlyConfigured, which `qorven` prints as a configuration
error) instead of a traceback, or a default taken in silence, or a failure at the first
request that uses it.

Env (reader) reads and checks each variable; the checks of URLs and host names it shares
with `qorven setup` are in addresses, the database entry in database, the settings
file's own check in env_file, and the embedded default's key file in secret_key."""
from __future__ import annotations

from .addresses import http_url_check, public_url_check, url_without_credentials
from .env_file import env_file_check
from .reader import Env, meta_header_name
from .secret_key import secret_key_kept

__all__ = ["Env", "env_file_check", "http_url_check", "meta_header_name", "public_url_check",
           "secret_key_kept", "url_without_credentials"]
