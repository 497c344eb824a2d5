"""The URLs and host names Qorven's settings take, checked as they are read, and a URL
shown without the credentials it may carry."""
from __future__ import annotations

import re
from urllib.parse import SplitResult, urlsplit

import environ

# A host name: dot-separated labels of letters, digits and hyphens, the last not a number
# (10.0.0.300 is a mistyped address, not a name).
_LABEL = r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?"
HOST_NAME = re.compile(rf"(?:{_LABEL}\.)*(?![0-9]+\.?$){_LABEL}\.?", re.IGNORECASE)


def public_url_check(var: str, value: str) -> None:
    """ImproperlyConfigured unless `value` is http(s), a host, an optional port and an
    optional path (Qorven under a path of a shared host: QORVEN_URL_PREFIX), with no
    query, fragment or credentials."""
    from qorven.runtime.url_prefix import url_prefix_parse

    parts = url_parts(value)
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname \
            or parts.query or parts.fragment or parts.username or parts.password:
        raise environ.ImproperlyConfigured(
            f"{var} must be the scheme and host this server is reached at, like https://qorven.example.com "
            f"(or https://example.org/qorven under a path), not {value!r}")
    try:
        url_prefix_parse(var, parts.path)
    except environ.ImproperlyConfigured:
        raise environ.ImproperlyConfigured(
            f"{var} must be the address this server is reached at, like https://qorven.example.com or "
            f"https://example.org/qorven (a path of letters, digits, '-', '_', '.' and '~', none of Qorven's "
            f"own such as /chat), not {value!r}") from None


def http_url_check(var: str, value: str) -> None:
    """ImproperlyConfigured, naming `var`, unless `value` is an http(s) URL with a host (and
    a port that is a number); the value is shown without the credentials it may carry."""
    parts = url_parts(value)
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise environ.ImproperlyConfigured(
            f"{var} must be an http:// or https:// URL like http://127.0.0.1:11434/v1, not "
            f"{url_without_credentials(value)!r}")


def url_parts(value: str) -> SplitResult | None:
    """`value`'s parts, None when it is not a URL with a readable port."""
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 (raises on a port that is none)
    except ValueError:
        return None
    return parts


def url_without_credentials(url: str) -> str:
    """`url` with any `user:password@` before its host shown as `***@`, for a log line, an
    error or a report (it may not even parse)."""
    return re.sub(r"(?<=://)[^/?#]*@", "***@", url)


def broker_url_of_redis(url: str) -> str:
    """Celery's broker URL for the Redis at `url` (REDIS_URL): the same for redis:// and
    rediss://; a Unix socket as kombu names one, `redis+socket:///path`, its database
    (`?db=N`, redis-py's way) as kombu's `virtual_host` (kombu knows no `unix://`)."""
    from urllib.parse import parse_qs, urlencode

    parts = urlsplit(url)
    if parts.scheme != "unix":
        return url
    query = parse_qs(parts.query)
    database = query.pop("db", [""])[0]
    if database:
        query["virtual_host"] = [database]
    credentials = parts.netloc.rpartition("@")[0]  # unix://:password@/path, as redis-py takes one
    return (f"redis+socket://{credentials + '@' if credentials else ''}{parts.path}"
            + (f"?{urlencode(query, doseq=True)}" if query else ""))
