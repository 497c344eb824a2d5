"""How Qorven reads its environment: django-environ, with every malformed or out-of-range
value named in one line (ImproperlyConfigured, which `qorven` prints as a configuration
error) instead of a traceback, or a default taken in silence, or a failure at the first
request that uses it."""
from __future__ import annotations

import builtins
import ipaddress
import math
import os
import re
import warnings
from pathlib import Path

import environ

from qorven.runtime.durations import duration_parse
from qorven.runtime.zone_names import zone_choosable

from .addresses import HOST_NAME, http_url_check, public_url_check, url_parts, url_without_credentials
from .database import database_settings

_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_FALSE_STRINGS = ("false", "off", "no", "n", "0", "")


class Env(environ.Env):
    """django-environ, with a malformed number named in one line (ImproperlyConfigured,
    which `qorven` prints as a configuration error) instead of a bare ValueError, and
    each number's range checked the same way (`at_least`, `at_most`, `above`)."""

    def int(self, var, default=environ.Env.NOTSET, **bounds):  # type: ignore[override]
        return self._number(super().int, var, default, "a whole number", **bounds)

    def float(self, var, default=environ.Env.NOTSET, **bounds):  # type: ignore[override]
        return self._number(self._float_read, var, default, "a number", **bounds)

    def _float_read(self, var, default=environ.Env.NOTSET) -> builtins.float:  # the class's `float` is a method
        """A number as Python writes one. django-environ's own drops every character that is
        not a digit, a point, a comma or a minus first: `5m` was 5, `1e3` was 13."""
        if var not in self.ENVIRON:
            return super().float(var, default=default)
        value = float(self.str(var).strip())
        if not math.isfinite(value):  # nan, inf, or 1e400, which overflows to inf
            raise ValueError(value)
        return value

    @staticmethod
    def _number(read, var, default, what, *, at_least=None, at_most=None, above=None):
        try:
            value = read(var, default=default)
        except ValueError:
            raise environ.ImproperlyConfigured(f"{var} must be {what}, not {os.environ.get(var)!r}") from None
        wrong = ("at least", at_least) if at_least is not None and value < at_least else \
            ("at most", at_most) if at_most is not None and value > at_most else \
            ("more than", above) if above is not None and value <= above else None
        if wrong is not None:
            raise environ.ImproperlyConfigured(f"{var} must be {wrong[0]} {wrong[1]}, not {os.environ.get(var)!r}")
        return value

    def bool(self, var, default=environ.Env.NOTSET):  # type: ignore[override]
        """Only a word that says yes or no: django-environ reads any other ("maybe") as false."""
        if var not in self.ENVIRON:
            return super().bool(var, default=default)
        written = self.str(var)
        word = written.strip().lower()
        if word in self.BOOLEAN_TRUE_STRINGS or word in _FALSE_STRINGS:
            return word in self.BOOLEAN_TRUE_STRINGS
        raise environ.ImproperlyConfigured(f"{var} must be true or false (also 1/0, yes/no, on/off), not {written!r}")

    def addresses(self, var, default: list[str]) -> list[str]:
        """A list of IP addresses (written as Python writes them, so a client's is found in it)."""
        found = []
        for entry in self.list(var, default=default):
            try:
                found.append(str(ipaddress.ip_address(entry.strip())))
            except ValueError:
                raise environ.ImproperlyConfigured(f"{var} takes IP addresses, not {entry.strip()!r}") from None
        return found

    def networks(self, var, default: list[str]) -> list[str]:
        """A list of IP addresses and networks (10.0.0.0/8), each written as a network."""
        found = []
        for entry in (e.strip() for e in self.list(var, default=default)):
            if not entry:
                continue
            try:
                found.append(str(ipaddress.ip_network(entry, strict=False)))
            except ValueError:
                raise environ.ImproperlyConfigured(
                    f"{var} takes IP addresses and networks (10.0.0.0/8), not {entry!r}") from None
        return found

    def http_url(self, var: str, default: str) -> str:
        """A server's http(s) URL (a model server, a platform's API base), "" for none. One
        without its scheme (127.0.0.1:11434/v1) was taken, and the server was then
        "unreachable" on every call."""
        value = self.str(var, default=default).strip()
        if value:
            http_url_check(var, value)
        return value

    def http_urls(self, var: str, default: list[str]) -> list[str]:
        """A comma-separated list of http(s) URLs, each checked as `http_url` checks one."""
        urls = [entry.strip() for entry in self.list(var, default=default) if entry.strip()]
        for url in urls:
            http_url_check(var, url)
        return urls

    def allowed_hosts(self, var: str, default: list[str]) -> list[str]:
        """Django's ALLOWED_HOSTS: host names (`.example.com` for it and its subdomains, `*`
        for any) and addresses (`[::1]`), as a request's Host is matched to them. One written
        as a URL or with a port matches no request: every page would answer 400."""
        hosts = [entry.strip() for entry in self.list(var, default=default) if entry.strip()]
        for host in hosts:
            bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
            try:
                ipaddress.ip_address(bare)
                continue
            except ValueError:
                if host == "*" or HOST_NAME.fullmatch(host.removeprefix(".")):
                    continue
            raise environ.ImproperlyConfigured(
                f"{var} takes host names (qorven.example.com; .example.com for it and its subdomains; * for any) "
                f"and addresses, without a scheme, port or path, not {host!r}")
        return hosts

    def header(self, var: str, default: str) -> str:
        """An HTTP request header's name, as Django's META names it (HTTP_X_REAL_IP) or as
        it is sent (X-Real-IP); empty: none."""
        value = self.str(var, default=default).strip()
        if value and not re.fullmatch(r"[A-Za-z0-9_-]+", value):
            raise environ.ImproperlyConfigured(
                f"{var} must be a header name like HTTP_X_FORWARDED_FOR or X-Real-IP, not {value!r}")
        return value

    def public_url(self, var: str, default: str) -> str:
        """The address a server is reached at (see `public_url_check`)."""
        value = self.str(var, default=default).strip()
        public_url_check(var, value)
        return value

    def url_prefix(self, var: str, default: str) -> str:
        """The path Qorven is served under (`/qorven`), "" for none (see url_prefix_parse)."""
        from qorven.runtime.url_prefix import url_prefix_parse

        return url_prefix_parse(var, self.str(var, default=default))

    def hosts(self, var, default: list[str]) -> list[str]:
        """A list of host names, IP addresses and networks (10.0.0.0/8)."""
        entries = [entry.strip() for entry in self.list(var, default=default) if entry.strip()]
        for entry in entries:
            try:
                ipaddress.ip_network(entry, strict=False)
                continue
            except ValueError:
                if "/" not in entry and HOST_NAME.fullmatch(entry):
                    continue
            raise environ.ImproperlyConfigured(
                f"{var} takes host names, IP addresses and networks (10.0.0.0/8), not {entry!r}")
        return entries

    def outbound_proxy(self, var: str, default: str) -> str:
        """Empty, `env`, or an http(s) proxy's URL: a scheme, `user:password@` if the proxy
        asks for them, a host and a port. A refused value is named without its credentials."""
        value = self.str(var, default=default).strip()
        if value in ("", "env"):
            return value
        parts = url_parts(value)
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname \
                or parts.path not in ("", "/") or parts.query or parts.fragment:
            raise environ.ImproperlyConfigured(
                f"{var} must be empty, env (the environment's HTTPS_PROXY, HTTP_PROXY and NO_PROXY) or an "
                f"http(s) proxy's URL like http://proxy.internal:3128, not {url_without_credentials(value)!r}")
        return value

    def duration(self, var, default=environ.Env.NOTSET) -> str:
        """A duration (qorven.runtime.durations: 3600, 30m, 12h, 7d, 2w; 0 is none), checked
        here and kept as written: the code that uses it parses it again."""
        value = self.str(var, default=default)
        try:
            duration_parse(value)
        except ValueError as exc:
            raise environ.ImproperlyConfigured(f"{var} {exc}") from None
        return value

    def redis_url(self, var: str, default: str) -> str:
        """A Redis server's URL (redis://, rediss:// or unix://), "" for none. Checked here:
        redis-py refuses a malformed one only when it first connects, which for a server
        process was its first task, and nothing said why."""
        value = self.str(var, default=default).strip()
        if not value:
            return value
        parts = url_parts(value)
        database = (parts.path.strip("/") if parts else "")
        if parts is None or not (
                (parts.scheme in ("redis", "rediss") and parts.hostname and (not database or database.isdigit()))
                or (parts.scheme == "unix" and parts.path)):
            raise environ.ImproperlyConfigured(
                f"{var} must be a Redis URL like redis://127.0.0.1:6379/0 (rediss:// over TLS, "
                f"unix:///path/to/redis.sock for a socket), not {url_without_credentials(value)!r}")
        return value

    def mail_server(self, var: str) -> dict:
        """Django's EMAIL_* settings for the mail server URL in `var`, {} when it is empty. A
        scheme django-environ does not know, a port that is not a number or an SMTP URL
        without a host is named in one line, without the password the URL may carry."""
        value = self.str(var, default="").strip()
        if not value:
            return {}
        parts = url_parts(value)
        if parts is None or parts.scheme not in self.EMAIL_SCHEMES \
                or (parts.scheme.startswith("smtp") and not parts.hostname):
            raise environ.ImproperlyConfigured(
                f"{var} must be a mail server's URL like smtp+tls://user:pass@smtp.example.com:587 (smtp://, "
                f"smtps://, smtp+tls://, smtp+ssl://, or consolemail:// to print mail), not "
                f"{url_without_credentials(value)!r}")
        return self.email_url_config(value)

    def db_url(self, var=environ.Env.DEFAULT_DATABASE_ENV, default=environ.Env.NOTSET, engine=None):  # type: ignore[override]
        with warnings.catch_warnings():  # a scheme it does not know: the settings say so, in one line
            warnings.simplefilter("ignore", UserWarning)
            return super().db_url(var, default=default, engine=engine)

    def database(self, var: str, default: str, *, root: Path) -> dict:
        """Django's DATABASES entry for the URL in `var`: PostgreSQL or SQLite only, each
        with the options Qorven runs it with. A relative SQLite file is taken from `root`
        (the project's), not from the folder the process started in."""
        return database_settings(self, var, default, root=root)

    def choice(self, var: str, default: str, choices: tuple[str, ...]) -> str:
        """One of a few words, written exactly so."""
        value = self.str(var, default=default)
        if value not in choices:
            raise environ.ImproperlyConfigured(f"{var} must be {_either(choices)}, not {value!r}")
        return value

    def log_level(self, var: str, default: str) -> str:
        """A logging level in any case, given back in capitals (logging knows only those)."""
        written = self.str(var, default=default)
        level = written.strip().upper()
        if level not in _LOG_LEVELS:
            raise environ.ImproperlyConfigured(f"{var} must be {_either(_LOG_LEVELS)} (any case), not {written!r}")
        return level

    def time_zone(self, var: str, default: str) -> str:
        """An IANA time zone name a person can choose (qorven.runtime.zone_names): not a
        folder ("Europe"), nor this server's own clock ("localtime")."""
        value = self.str(var, default=default)
        if not zone_choosable(value):
            raise environ.ImproperlyConfigured(
                f"{var} must be a time zone name like UTC or Europe/Berlin, not {value!r}")
        return value

    def rate(self, var: str, default: str) -> str:
        """A django-ratelimit rate (5/15m: five per fifteen minutes), checked as it is read: a
        malformed one failed only at the first request it had to count (a server error)."""
        value = self.str(var, default=default)
        if not re.fullmatch(r"[0-9]+/[0-9]*[smhd]", value):
            raise environ.ImproperlyConfigured(f"{var} must be a rate like 5/15m (count/[number]s|m|h|d), not {value!r}")
        return value


def meta_header_name(name: str) -> str:
    """A request header's name as Django's META names it: HTTP_X_FORWARDED_PROTO for
    X-Forwarded-Proto (or for itself)."""
    meta = name.strip().upper().replace("-", "_")
    return meta if meta.startswith("HTTP_") else f"HTTP_{meta}"


def _either(choices: tuple[str, ...]) -> str:
    return ", ".join(choices[:-1]) + f" or {choices[-1]}" if len(choices) > 1 else choices[0]
