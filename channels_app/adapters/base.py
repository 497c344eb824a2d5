"""The adapter interface: verify a webhook, resolve its binding, parse it into
InboundMessages, fetch the media they name, and send a reply part. One small class per
platform."""
from __future__ import annotations

import hashlib
import hmac
import logging
import threading
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import urlsplit

import httpx
from django.conf import settings
from django.http import HttpRequest, HttpResponse


from ..formatting import AS_WRITTEN, Style
from ..inbound import InboundImage, InboundMedia, InboundMessage
from ..models import ChannelBinding
from ..platforms import webhook_bindings

logger = logging.getLogger(__name__)



class WebhookRejected(Exception):
    """Bad or missing signature, unknown binding: answered with `status` and `reason`,
    nothing stored. `detail`, for the log only, says more than the answer may."""

    def __init__(self, status: int, reason: str, *, detail: str = "") -> None:
        super().__init__(reason)
        self.status = status
        self.detail = detail


class SendError(Exception):
    """A failed send. `permanent` (a 4xx other than 429): retrying cannot help.
    `ambiguous`: the request went out and no answer came back (the connection was reset,
    the answer timed out), so the platform may have the message: sending it again could
    deliver it twice. `account`: the platform refused the account itself (a bad or revoked
    token, its access taken away), not only this message: nothing goes out through it
    until its credentials are fixed. `chat`: the platform refused the one chat (the person
    blocked the bot, it was removed from the group, the channel is archived), not only
    this message: nothing goes out to that chat, though the account still sends elsewhere."""

    def __init__(self, message: str, *, permanent: bool, retry_after: float | None = None,
                 ambiguous: bool = False, status: int | None = None, account: bool = False,
                 chat: bool = False) -> None:
        super().__init__(message)
        self.permanent = permanent or account or chat
        self.account = account
        self.chat = chat and not account
        self.retry_after = retry_after
        self.ambiguous = ambiguous
        self.status = status  # the platform's HTTP status, when it answered
        self.migrated_to: int | None = None  # Telegram: the chat's new id, when it refused the old one
        # The platform's id ("" when unread) of a message of ours it took ahead of the part
        # before the part failed (a Discord late answer's header, sent on its own): the part
        # is begun, and its retry leaves that message out (channels_app.one_off_targets.nothing_sent_to).
        self.begun_id: str | None = None


# Raised once the request may have reached the platform: read errors and timeouts come
# after the request was written (httpx raises ConnectError/ConnectTimeout/PoolTimeout, or
# WriteError/WriteTimeout, when it was not).
_AFTER_THE_REQUEST = (httpx.ReadError, httpx.ReadTimeout, httpx.RemoteProtocolError)


def send_unreachable(platform: str, exc: Exception) -> SendError:
    """The SendError for a send that got no answer from `platform`: transient when the
    request never went out, ambiguous when it may have been delivered."""
    ambiguous = isinstance(exc, _AFTER_THE_REQUEST)
    return SendError(f"{platform} unreachable: {type(exc).__name__}", permanent=False, ambiguous=ambiguous)


@dataclass(frozen=True)
class Undelivered:
    """A platform's later word that a part it accepted (and named `platform_message_id`)
    did not reach the person; `reason` is the platform's, for the admin and the log."""

    platform_message_id: str
    reason: str
    # The platform says the chat itself is closed to us (WhatsApp's 24-hour window):
    # our notice would not get there either (SendError.chat).
    chat: bool = False
    # The platform says the account itself may not send (WhatsApp: a locked or unpaid
    # business account): our notice through it would fail too (SendError.account).
    account: bool = False


@dataclass
class Parsed:
    """What a webhook carried: messages to process, parts sent earlier that the platform
    now reports undelivered, and/or an immediate response body (a verification
    challenge, a Discord deferral)."""

    messages: list[InboundMessage]
    response: HttpResponse | None = None
    undelivered: list[Undelivered] = field(default_factory=list)


class Adapter:
    kind: str = ""
    limit: int = 4000
    # How its parts are written (channels_app.formatting): the model's Markdown in the
    # platform's own formatting, text of ours so that it formats nothing. `send` takes a
    # part so written.
    style: Style = AS_WRITTEN
    # Credentials `qorven bind <kind>` asks for: name → help. Secrets are never printed.
    credentials: dict[str, str] = {}
    required: tuple[str, ...] = ()
    # The methods its webhook takes: POST, and GET for a platform's verification handshake.
    methods: tuple[str, ...] = ("POST",)
    # Whether its messages can come from group chats (ChannelBinding.group_answers applies).
    groups: bool = False

    def lookup_key(self, credentials: dict[str, str]) -> str:
        """The value an inbound request names its binding by."""
        raise NotImplementedError

    def prepare_credentials(self, credentials: dict[str, str]) -> dict[str, str]:
        """Fill in what Qorven makes itself (a webchat's key and secret)."""
        return credentials

    def verify_key(self, credentials: dict[str, str]) -> str:
        """ChannelBinding.verify_key for these credentials: the digest of the secret a
        handshake names the binding by alone ("" when the platform's has none)."""
        return ""

    def credentials_problem(self, credentials: dict[str, str]) -> tuple[str, str] | None:
        """(credential, what is wrong with it) for a value that would be misread (a typo
        taken for a setting), which is refused, not stored; None when all is well."""
        return None

    def account_proof(self, credentials: dict[str, str]) -> AccountProblem | None:
        """Why the platform does not confirm that these credentials control the account the
        webhooks name the binding by (its `lookup_key`), in our words; None when it does, or
        when there is nothing to prove (a key the binder chose as a secret, or one Qorven
        made). Asked before a binding is saved with new credentials, so nobody binds, or
        learns the owner of, an account they do not control. Never raises: a platform that
        cannot be asked is a problem too (nothing is saved unconfirmed)."""
        return None

    def binding_to_update(self, *, qor: Any, given: dict[str, str]) -> ChannelBinding | None:
        """The Qor's binding that `qorven bind` with these credentials changes, when the
        credentials do not name the account themselves (a webchat without --key)."""
        return None

    def target_lasts(self, target: str) -> bool:
        """Whether a message's reply target is where its sender can be reached later (kept on
        their Identity, for replies that answer nothing: reminders, heartbeats), not a
        one-off (a Discord interaction's token, valid 15 minutes)."""
        return True

    def setup_hint(self, binding: ChannelBinding, given: dict[str, str]) -> list[str]:
        """What `qorven bind` tells the owner to do next. Never a secret they gave."""
        if settings.QORVEN_PUBLIC_URL_GIVEN:
            return [f"webhook: POST {webhook_url(self.kind)}"]
        # The loopback default: no platform reaches it.
        return [f"webhook (a local example, not an address {self.kind} reaches): POST {webhook_url(self.kind)}",
                public_url_unset_note(f"{self.kind} reaches")]

    # --- inbound ---
    def resolve(self, request: HttpRequest) -> ChannelBinding:
        """The binding this request is for, verified. Raises WebhookRejected. Bindings are
        read through this process's cache only (enabled_binding, webhook_bindings), so that a
        webhook can be screened with it on the event loop before it waits to be stored
        (channels_app.webhooks.webhook_screen)."""
        raise NotImplementedError

    def unbound(self, named: str) -> WebhookRejected:
        """The refusal of a webhook naming no enabled binding here by `named` (its lookup key,
        for the log only): also what a webhook is answered whose binding was switched off or
        deleted by the time it was stored (channels_app.event_insert)."""
        return WebhookRejected(403, f"no {self.kind} binding for this request")

    def enabled_binding(self, lookup_key: str) -> ChannelBinding:
        """The enabled binding of this kind with this lookup key, with its tenant and Qor, from
        this process's cache of bindings (see qorven.runtime.row_cache). Raises `unbound`.

        The instance is shared by the requests that find it: read it, never change it."""
        binding = webhook_bindings.get(
            (self.kind, lookup_key),
            lambda: ChannelBinding.objects.select_related("tenant", "qor").filter(
                kind=self.kind, lookup_key=lookup_key, enabled=True
            ).first(),
        )
        if binding is None:
            raise self.unbound(lookup_key)
        return binding

    def cache_entries(self, bindings: list[ChannelBinding]) -> dict[Any, Any]:
        """The entries of webhook_bindings `resolve` reads for these enabled bindings of its
        kind (with their tenant and Qor), by key: what a process starting keeps of them."""
        return {(self.kind, binding.lookup_key): binding for binding in bindings}

    def parse(self, request: HttpRequest, binding: ChannelBinding) -> Parsed:
        """The request's messages. No platform I/O: media are named (`InboundMessage.media`),
        not fetched, so the webhook answers at once."""
        raise NotImplementedError

    def fetch_media(self, binding: ChannelBinding, media: InboundMedia) -> InboundImage | None:
        """Fetch one media item `parse` named; run by the processing task. None when it
        cannot be had (unreachable, refused, too big): the message counts without it. The
        failure is logged here, never with a credential or a URL holding one."""
        return None

    def withdraw(self, binding: ChannelBinding, target: str) -> None:
        """Take back what the platform shows the person while they wait for an answer at a
        one-off target (see target_lasts) that will get none. Best effort: never raises."""
        return None

    def settle(self, binding: ChannelBinding, message: InboundMessage) -> InboundMessage:
        """The message with what its webhook left open decided, in the processing task,
        where the platform may be asked (whether a Slack mention names the bot, when
        nothing said which user the bot is). As parsed, by default."""
        return message

    def display_name(self, binding: ChannelBinding, sender_id: str) -> str:
        """The sender's name, for a platform whose events carry only an id (Slack); run by
        the processing task, its answer cached. "" when unknown or unreachable."""
        return ""

    def handle_get(self, request: HttpRequest) -> HttpResponse:
        """A GET of the webhook (a platform's verification handshake); only for an adapter
        whose `methods` has GET."""
        raise NotImplementedError

    # --- outbound ---
    def length(self, text: str) -> int:
        """How the platform counts `text` against `limit`: code points, unless it says
        otherwise."""
        return len(text)

    def send(self, binding: ChannelBinding, target: str, text: str) -> str:
        """Send one part, written in `style`; return the platform's message id. Raises SendError."""
        raise NotImplementedError

    # --- helpers shared by adapters ---
    @staticmethod
    @contextmanager
    def http() -> Iterator[httpx.Client]:
        """The process's platform HTTP client, for `with self.http() as client:` — shared
        by every send on every thread, so connections and the TLS context are made once,
        not per message (loading the CA store alone took ~25 ms a call)."""
        yield platform_client()

    @staticmethod
    def raise_for_status(response: httpx.Response, *, retry_after: float | None = None,
                         account: Collection[int] | bool = (), chat: bool = False, later: bool = False) -> None:
        """Raise the SendError of a refused send. `account`: the statuses with which the
        platform refuses the account itself, not only the message (SendError.account), or
        whether this answer does; `chat`: whether this answer refuses the one chat
        (SendError.chat); `later`: whether the platform's own code says trying again later
        may do, whatever the status (Meta answers its rate limits with a 400)."""
        if response.status_code < 300:
            return
        text = response.text[:300]
        if response.status_code == 429 or response.status_code >= 500 or later:
            after = retry_after if retry_after is not None else retry_after_seconds(response.headers.get("Retry-After"))
            raise SendError(f"{response.status_code}: {text}", permanent=False, retry_after=after,
                            status=response.status_code)
        refused = account if isinstance(account, bool) else response.status_code in account
        raise SendError(f"{response.status_code}: {text}", permanent=True, status=response.status_code,
                        account=refused, chat=chat)

    @staticmethod
    def error_code(response: httpx.Response, *path: str) -> Any:
        """The platform's own error code in a refusal's JSON, read along `path` (Discord's
        `code`, Meta's `error.code`); None when the answer has none we can read."""
        try:
            value: Any = response.json()
            for step in path:
                value = value[step]
        except (ValueError, KeyError, IndexError, TypeError):
            return None
        return value

    @staticmethod
    def accepted_id(response: httpx.Response, *path: str | int) -> str:
        """The platform's id of a part it accepted (a 2xx), read along `path` in its JSON
        answer; "" when the answer is not what we expected (a proxy's "OK", a cut body).
        Never raises: the part has been delivered, and a part is never sent twice."""
        try:
            value: Any = response.json()
            for step in path:
                value = value[step]
        except (ValueError, KeyError, IndexError, TypeError):
            logger.warning("a platform accepted a part with an answer we could not read (HTTP %s)",
                           response.status_code)
            return ""
        return str(value) if value is not None else ""


def retry_after_seconds(header: str | None) -> float | None:
    """A Retry-After header's wait in seconds: a number, or an HTTP date (RFC 9110); None
    when absent or unreadable (the send's own backoff applies then)."""
    if not header:
        return None
    try:
        return max(float(header), 0.0)
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(header)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max((when - datetime.now(UTC)).total_seconds(), 0.0)


_clients: dict[float, httpx.Client] = {}
_clients_lock = threading.Lock()


def platform_client() -> httpx.Client:
    """One long-lived client per process (and per timeout setting); httpx clients are
    safe to share between threads. Built as `qorven serve` and `qorven worker` start
    (`platform_client_build`), else on first use."""
    timeout = settings.QORVEN_PLATFORM_TIMEOUT
    client = _clients.get(timeout)
    if client is None:
        with _clients_lock:
            client = _clients.get(timeout)
            if client is None:
                client = _clients[timeout] = httpx.Client(
                    timeout=timeout, limits=httpx.Limits(max_connections=64, max_keepalive_connections=16)
                )
    return client


def platform_client_build() -> None:
    """As a process that sends to platforms starts: build its client now, not on the
    first reply (building one loads the CA store: 50–60 ms on a slow 2-CPU machine, paid
    by the first reply of every worker child). A worker's children are forked after
    this, before any connection is made, and start with it (as with the model's client,
    qorven.llm.sdk_load)."""
    platform_client()


@dataclass(frozen=True)
class AccountProblem:
    """Why a platform did not confirm a binding's account, in our words. `refused`: it
    answered no; otherwise it could not be asked (`why`: unreachable, HTTP 503…), and
    trying again later may do."""

    text: str
    refused: bool = True
    why: str = ""

    def __str__(self) -> str:
        return self.text


class ProofFailed(Exception):
    def __init__(self, problem: AccountProblem) -> None:
        super().__init__(problem.text)
        self.problem = problem


def account_unconfirmed(platform: str, why: str) -> AccountProblem:
    """The problem of a platform that could not be asked (`why`: ours, never its text)."""
    return AccountProblem(f"{platform} could not confirm the account ({why}); nothing was saved, try again later.",
                          refused=False, why=why)


def proof_answer(platform: str, method: str, url: str, *, refused: str, **kwargs: Any) -> Any:
    """The JSON a platform answered an account proof with (a 2xx). Raises ProofFailed with
    `refused` when it turned the credentials down (a 4xx other than 429), and with a
    try-again notice when it could not be asked (unreachable, 429, 5xx, an unreadable
    answer). Its own words go to the log only."""
    def unasked(why: str) -> ProofFailed:
        return ProofFailed(account_unconfirmed(platform, why))

    try:
        response = platform_client().request(method, url, **kwargs)
    except httpx.HTTPError as exc:
        logger.warning("%s could not be reached for an account proof: %s", platform, type(exc).__name__)
        raise unasked(f"unreachable: {type(exc).__name__}") from None
    if response.status_code == 429 or response.status_code >= 500:
        logger.warning("%s answered an account proof with HTTP %s", platform, response.status_code)
        raise unasked(f"HTTP {response.status_code}")
    if response.status_code >= 300:
        logger.info("%s refused an account proof: HTTP %s %s", platform, response.status_code, response.text[:300])
        raise ProofFailed(AccountProblem(refused))
    try:
        return response.json()
    except ValueError:
        logger.warning("%s answered an account proof with a body that is not JSON", platform)
        raise unasked("an answer we could not read") from None


def proves_account(adapter: Adapter) -> bool:
    """Whether binding this platform asks it to confirm the account first."""
    return type(adapter).account_proof is not Adapter.account_proof


def secret_digest(secret: str) -> str:
    """How a shared webhook secret is looked up without storing it in the clear twice."""
    return hashlib.sha256(secret.encode()).hexdigest()


def same_secret(expected: str, given: str) -> bool:
    """Constant-time comparison of two secrets or signatures that never raises: a header
    holding non-ASCII characters is simply not a match."""
    return hmac.compare_digest(expected.encode("utf-8", "surrogateescape"), given.encode("utf-8", "surrogateescape"))


def hmac_hex(key: str, body: bytes, algo=hashlib.sha256) -> str:
    return hmac.new(key.encode(), body, algo).hexdigest()


def public_url_unset_note(reached: str) -> str:
    """What `qorven bind` says under an address made from QORVEN_PUBLIC_URL's default, which
    is port 8000 of this machine, whatever port the server was started on; `reached` says
    who must reach the address to set instead ("telegram reaches")."""
    return (f"(QORVEN_PUBLIC_URL is unset, so addresses are made from its default, {settings.QORVEN_PUBLIC_URL}, "
            f"whatever port `qorven serve` listens on: set QORVEN_PUBLIC_URL to the https address {reached} this "
            "server at, then run bind again)")


def webhook_url(kind: str) -> str:
    """Where the platform posts this channel's webhooks: QORVEN_PUBLIC_URL (with
    QORVEN_URL_PREFIX, when Qorven is served under a path) + the path."""
    return f"{settings.QORVEN_PUBLIC_URL.rstrip('/')}/v1/webhooks/{kind}"


def media_url_allowed(url: str, *, hosts: tuple[str, ...], api_base: str) -> bool:
    """Whether a media URL a platform named may be fetched (with its token): https on one
    of the platform's own `hosts` (a leading dot: any subdomain), or the configured API's
    own origin (a proxy, or the test servers)."""
    parts, api = urlsplit(url), urlsplit(api_base)
    if parts.scheme in ("http", "https") and (parts.scheme, parts.netloc) == (api.scheme, api.netloc):
        return True
    host = (parts.hostname or "").lower()
    return parts.scheme == "https" and any(host.endswith(h) or host == h.lstrip(".") for h in hosts)


def download_limited(client: httpx.Client, url: str, *, headers: dict[str, str] | None = None,
                     limit: int) -> bytes | None:
    """The body at `url`, or None once it passes `limit` bytes (read no further)."""
    with client.stream("GET", url, headers=headers or {}) as response:
        response.raise_for_status()
        declared = response.headers.get("Content-Length", "")
        if declared.isdigit() and int(declared) > limit:
            return None
        body = bytearray()
        for chunk in response.iter_bytes():
            body += chunk
            if len(body) > limit:
                return None
    return bytes(body)


def checked_media(binding: ChannelBinding, media: InboundMedia, content: bytes, platform: str) -> InboundImage | None:
    """Fetched bytes as an attachment when they are one kept (an image, a PDF, a text file,
    checked by content as uploads are); None, logged by kind only, otherwise."""
    from ..uploads import UploadRefused, attachment_check

    try:
        checked = attachment_check(content, media.name)
    except UploadRefused as exc:
        logger.info("a %s attachment on binding %s was left out (%s)", platform, binding.pk, exc.status)
        return None
    return InboundImage(mime_type=checked.mime_type, data=checked.data, size=checked.size, name=checked.name)
