"""Slack Events API in, chat.postMessage out.

Requests are signed: `X-Slack-Signature: v0=<HMAC-SHA256(signing_secret, "v0:{ts}:{body}")>`
with `X-Slack-Request-Timestamp` no older than five minutes. The binding is named by the
payload's `api_app_id`. DMs (`channel_type: im`) join the canonical chat as `slack_dm`;
channel messages are a group session answered only when the bot is mentioned. A message
is known by its channel and `ts`: Slack's retries (`X-Slack-Retry-Num`), and the
app_mention it sends beside the message event of a mention, are deduped like any
redelivery.
Credentials: `app_id`, `bot_token`, `signing_secret`, `bot_user_id`.
"""
from __future__ import annotations

import logging
import re
import time
from typing import Any

from django.conf import settings
from django.core.cache import cache
from django.db import transaction
from django.http import HttpRequest, JsonResponse

from qorven.runtime.cache_away import cache_or
from qorven.runtime.repeated_failure import RepeatedFailure

from ..formatting import SLACK_MRKDWN
from ..inbound import InboundImage, InboundMedia, InboundMessage
from ..json_body import json_body
from ..models import ChannelBinding
from .base import (
    AccountProblem,
    Adapter,
    Parsed,
    ProofFailed,
    SendError,
    WebhookRejected,
    account_unconfirmed,
    checked_media,
    download_limited,
    hmac_hex,
    media_url_allowed,
    platform_client,
    proof_answer,
    same_secret,
    send_unreachable,
    webhook_bindings,
)

MAX_SKEW = 5 * 60


logger = logging.getLogger(__name__)

THREAD_SEP = "|"  # a reply target in a thread: channel id, then the thread's ts


class SlackAdapter(Adapter):
    kind = "slack"
    limit = 4000
    style = SLACK_MRKDWN
    groups = True
    credentials = {
        "app_id": "the Slack app id (api_app_id in events)",
        "bot_token": "the bot user OAuth token (xoxb-…)",
        "signing_secret": "the app's signing secret",
        "bot_user_id": "the bot's user id (U…), to notice mentions (optional: events name it too)",
    }
    required = ("app_id", "bot_token", "signing_secret")

    def lookup_key(self, credentials: dict[str, str]) -> str:
        return credentials["app_id"]

    def account_proof(self, credentials: dict[str, str]) -> AccountProblem | None:
        """auth.test with the bot token names its app (newer tokens), or its bot, whose app
        bots.info names: it must be the app events are looked up by (`api_app_id`)."""
        app_id = self.lookup_key(credentials)
        base = settings.SLACK_API_BASE.rstrip("/")
        auth = {"Authorization": f"Bearer {credentials.get('bot_token', '')}"}
        refused = "Slack did not accept this bot token."
        try:
            me = proof_answer("Slack", "POST", f"{base}/auth.test", refused=refused, headers=auth)
            problem = _slack_refusal(me, refused)
            if problem:
                return problem
            found = str(me.get("app_id") or "")
            if not found and me.get("bot_id"):
                bot = proof_answer("Slack", "GET", f"{base}/bots.info", params={"bot": str(me["bot_id"])},
                                   refused=refused, headers=auth)
                problem = _slack_refusal(bot, "Slack did not say which app this bot token is of (bots.info "
                                              "needs the users:read scope).")
                if problem:
                    return problem
                info = bot.get("bot")
                found = str(info.get("app_id") or "") if isinstance(info, dict) else ""
        except ProofFailed as exc:
            return exc.problem
        if found != app_id:
            return AccountProblem(f"This bot token is not one of the Slack app {app_id}.")
        return None

    def resolve(self, request: HttpRequest) -> ChannelBinding:
        signature = request.headers.get("X-Slack-Signature", "")
        stamp = request.headers.get("X-Slack-Request-Timestamp", "")
        if not signature or not stamp:
            raise WebhookRejected(401, "missing Slack signature headers")
        try:
            if abs(time.time() - int(stamp)) > MAX_SKEW:
                raise WebhookRejected(401, "Slack request timestamp outside the 5-minute window")
        except ValueError:
            raise WebhookRejected(401, "bad X-Slack-Request-Timestamp") from None
        try:
            body = json_body(request)
            app_id = str(body.get("api_app_id") or "")
        except (ValueError, AttributeError):
            raise WebhookRejected(400, "body is not Slack JSON") from None
        if not app_id and (body.get("type") != "url_verification" or len(request.body) > URL_CHECK_MAX_BYTES):
            # Checked against every binding's secret, a request naming no app would have
            # the body hashed once per Slack app on the server: only Slack's URL check,
            # a few dozen bytes, names none.
            raise WebhookRejected(401, "no api_app_id in a Slack request other than its URL check")
        candidates = webhook_bindings.get((self.kind, "candidates", app_id), lambda: _candidates(self.kind, app_id)) or []
        base = b"v0:" + stamp.encode() + b":" + request.body
        for binding in candidates:  # url_verification carries no app id: the signature decides
            expected = "v0=" + hmac_hex(str(binding.credentials.get("signing_secret", "")), base)
            if same_secret(expected, signature):
                return binding
        raise self.unbound(app_id)

    def unbound(self, named: str) -> WebhookRejected:
        # The one answer to a bad signature, whether the app is bound here or not.
        return WebhookRejected(401, "bad Slack signature")

    def cache_entries(self, bindings: list[ChannelBinding]) -> dict[Any, Any]:
        entries: dict[Any, Any] = {(self.kind, "candidates", ""): list(bindings)} if bindings else {}
        for binding in bindings:  # as _candidates reads them
            entries.setdefault((self.kind, "candidates", binding.lookup_key), []).append(binding)
        return entries

    def parse(self, request: HttpRequest, binding: ChannelBinding) -> Parsed:
        body = json_body(request)
        if body.get("type") == "url_verification":
            return Parsed([], JsonResponse({"challenge": body.get("challenge", "")}))
        event = body.get("event") or {}
        if body.get("type") != "event_callback" or event.get("type") not in ("message", "app_mention"):
            return Parsed([])
        files = [f for f in event.get("files") or [] if isinstance(f, dict) and f.get("id")]
        media = [InboundMedia(kind="file", file_id=str(f["id"]), mime_type=str(f.get("mimetype") or ""),
                              size=int(f.get("size") or 0) or None, name=str(f.get("name") or ""),
                              url=str(f.get("url_private_download") or f.get("url_private") or ""))
                 for f in files[:4]]
        subtype = event.get("subtype")
        if event.get("bot_id") or (subtype and subtype != "file_share") or not event.get("user") or not (
                event.get("text") or media):
            return Parsed([])  # our own posts, edits, joins…
        direct = event.get("channel_type") == "im"
        if event.get("type") == "app_mention" and direct:
            return Parsed([])
        bot = str(binding.credentials.get("bot_user_id", "")) or _authorized_bot(body)
        text = str(event.get("text") or "")
        channel_id = str(event.get("channel", ""))
        thread = str(event.get("thread_ts") or "")
        parent = str(event.get("parent_user_id") or "")
        # In a channel: mentioned, or replied to — a reply in the thread of one of the bot's
        # messages (a reply in Slack is written in the thread it answers).
        addressed = direct or event.get("type") == "app_mention" or bool(
            bot and (f"<@{bot}>" in text or (thread and parent == bot)))
        extra: dict[str, Any] = {}
        if not direct and not bot and not addressed:
            # Which user the bot is needs Slack's auth.test, which a webhook does not wait
            # for: the people it names are kept, and the task decides (settle).
            extra = {"mentions": sorted(set(_MENTION.findall(text))), "parent_user_id": parent if thread else ""}
        ts = str(event.get("ts") or "")
        return Parsed([
            InboundMessage(
                channel="slack_dm" if direct else "slack",
                # A message is its channel and ts, as Slack names it: a mention comes as a
                # message event and as an app_mention (two event ids), and is stored once,
                # whichever comes first and whether or not the bot is known by then.
                external_id=f"{channel_id}:{ts}" if channel_id and ts else str(body.get("event_id") or ""),
                sender_id=str(event["user"]), text=slack_plain(text), group=not direct,
                thread_id="" if direct else channel_id,
                addressed=addressed,
                # A question asked in a thread is answered in that thread (channel THREAD_SEP ts).
                reply_target=channel_id + (THREAD_SEP + thread if thread else ""),
                media=media, extra=extra,
            )
        ])

    def settle(self, binding: ChannelBinding, message: InboundMessage) -> InboundMessage:
        """A channel message that named people when neither the binding nor the event said
        which user the bot is: addressed if one of them is the bot (or it answers in a
        thread of the bot's), now that the bot's id is known (bot_user_id, learned once)."""
        mentions, parent = message.extra.get("mentions"), message.extra.get("parent_user_id")
        if message.addressed or not (mentions or parent):
            return message
        bot = bot_user_learn(binding)
        if not bot:
            return message
        return message.model_copy(update={"addressed": bot in (mentions or []) or bot == parent})

    def fetch_media(self, binding: ChannelBinding, media: InboundMedia) -> InboundImage | None:
        """A shared file, from its private URL with the bot token (files:read scope); only
        from Slack's own hosts."""
        limit = settings.QORVEN_MAX_UPLOAD
        if not media.url or not media_url_allowed(media.url, hosts=(".slack.com", ".slack-edge.com"),
                                                  api_base=settings.SLACK_API_BASE):
            logger.warning("a Slack file on binding %s names no URL of Slack's; not fetched", binding.pk)
            return None
        if media.size is not None and media.size > limit:
            logger.warning("a Slack file on binding %s is too big to keep (%s bytes)", binding.pk, media.size)
            return None
        token = {"Authorization": f"Bearer {binding.credentials.get('bot_token', '')}"}
        try:
            with self.http() as client:
                content = download_limited(client, media.url, headers=token, limit=limit)
        except Exception as exc:  # the text still counts
            logger.warning("could not fetch a Slack file on binding %s: %s", binding.pk, type(exc).__name__)
            return None
        if content is None:
            logger.warning("a Slack file on binding %s is too big to keep", binding.pk)
            return None
        return checked_media(binding, media, content, "Slack")

    def display_name(self, binding: ChannelBinding, sender_id: str) -> str:
        """users.info with the bot token: the profile's display name, else the real name."""
        url = f"{settings.SLACK_API_BASE.rstrip('/')}/users.info"
        try:
            with self.http() as client:
                response = client.get(url, params={"user": sender_id},
                                      headers={"Authorization": f"Bearer {binding.credentials.get('bot_token', '')}"})
            data = response.json() if response.status_code == 200 else {}
        except Exception as exc:  # the message counts without a name
            logger.warning("Slack users.info failed for binding %s: %s", binding.pk, type(exc).__name__)
            return ""
        user = data.get("user") if isinstance(data, dict) and data.get("ok") else None
        if not isinstance(user, dict):
            return ""
        profile: dict[str, Any] = user["profile"] if isinstance(user.get("profile"), dict) else {}
        for name in (profile.get("display_name"), profile.get("real_name"), user.get("real_name"), user.get("name")):
            if isinstance(name, str) and name.strip():
                return name.strip()[:200]
        return ""

    def send(self, binding: ChannelBinding, target: str, text: str) -> str:
        url = f"{settings.SLACK_API_BASE.rstrip('/')}/chat.postMessage"
        channel, _, thread = target.partition(THREAD_SEP)
        # Written in mrkdwn (SLACK_MRKDWN): what the model wrote is escaped there as Slack's
        # formatting guide says (<!channel>, <@U…> and <url> ping and link nobody).
        payload = {"channel": channel, "text": text}
        if thread:
            payload["thread_ts"] = thread
        try:
            with self.http() as client:
                response = client.post(url, json=payload,
                                       headers={"Authorization": f"Bearer {binding.credentials.get('bot_token', '')}"})
        except Exception as exc:
            raise send_unreachable("Slack", exc) from None
        self.raise_for_status(response)
        try:
            data = response.json()
            ok = bool(data.get("ok"))
        except (ValueError, AttributeError):
            # Slack answers every call 200 and says in the body whether it posted: without
            # a body we cannot tell, and a part is never sent twice.
            raise SendError("Slack answered with a body we could not read", permanent=True, ambiguous=True) from None
        if not ok:
            error = str(data.get("error", "unknown error"))
            raise SendError(f"Slack refused: {error}", permanent=error not in ("ratelimited", "internal_error"),
                            account=error in TOKEN_REFUSED, chat=error in CHAT_REFUSED)
        return str(data.get("ts", ""))


# Slack's errors for a bot token that cannot post anywhere (revoked, expired, the app
# uninstalled, its workspace gone, chat:write not granted): the account's, not the chat's.
TOKEN_REFUSED = frozenset({"invalid_auth", "not_authed", "account_inactive", "token_revoked", "token_expired",
                           "missing_scope", "no_permission", "team_access_not_granted", "ekm_access_denied"})
# Its errors for the one conversation (none the bot can see by that id, one it is not in,
# one archived): nothing reaches it, though the bot still posts elsewhere.
CHAT_REFUSED = frozenset({"channel_not_found", "not_in_channel", "is_archived"})


_MENTION = re.compile(r"<@([A-Z0-9]+)(?:\|[^<>]*)?>")
_ENTITY = re.compile(r"&(lt|gt|amp);")
_MARKUP = re.compile(r"<([^<>\n]*)>")


def _unescaped(text: str) -> str:
    """Slack's three escapes undone in one pass (so "&amp;lt;" stays the "&lt;" typed)."""
    return _ENTITY.sub(lambda m: {"lt": "<", "gt": ">", "amp": "&"}[m.group(1)], text)


def _markup_plain(inner: str) -> str:
    """One <…> of Slack's markup as the person saw it. A user mention stays as Slack wrote
    it (<@U…>: the id is what names them)."""
    target, _, label = inner.partition("|")
    target, label = _unescaped(target), _unescaped(label)
    if target.startswith("@"):
        return f"<{target}>"
    if target.startswith("#"):
        return f"#{label}" if label else f"<{target}>"
    if target.startswith("!"):  # <!here>, <!subteam^S…|@team>, <!date^…|fallback>
        return label or "@" + target[1:]
    address = target.removeprefix("mailto:")
    if not label:
        return address
    if label in (address, target.split("://", 1)[-1]):
        return label  # a link Slack made of what was typed: the text typed
    return f"{label} ({address})"


def slack_plain(text: str) -> str:
    """An event's text as the person wrote it: Slack sends &, < and > escaped and links,
    channels and mentions as <…> markup (its formatting reference, "Retrieving
    messages")."""
    out, last = [], 0
    for match in _MARKUP.finditer(text):
        out += [_unescaped(text[last:match.start()]), _markup_plain(match.group(1))]
        last = match.end()
    out.append(_unescaped(text[last:]))
    return "".join(out)


def _slack_refusal(answer: Any, refused: str) -> AccountProblem | None:
    """Slack answers 200 and says in the body whether it did: `ok`, or an error code, which
    is either a refusal or Slack being busy (try again)."""
    if isinstance(answer, dict) and answer.get("ok"):
        return None
    error = str(answer.get("error", "")) if isinstance(answer, dict) else ""
    if error in ("ratelimited", "internal_error", "fatal_error", "service_unavailable", "request_timeout"):
        return account_unconfirmed("Slack", "busy")
    return AccountProblem(refused)


def _authorized_bot(body: dict[str, Any]) -> str:
    """The bot user an event was delivered to, as the event itself says (`authorizations`,
    in every Events API payload since 2021): a binding saved without `bot_user_id` still
    tells a mention of its bot from another's, and takes a mention once, not twice (as the
    message event and as the app_mention). "" when it does not say."""
    for authorization in body.get("authorizations") or []:
        if isinstance(authorization, dict) and authorization.get("is_bot") and authorization.get("user_id"):
            return str(authorization["user_id"])
    return ""


def bot_user_learn(binding: ChannelBinding) -> str:
    """The binding's bot user id: as saved, else asked of Slack once (auth.test with the bot
    token names the token's user) and saved on the binding, so later webhooks know it.
    "" when Slack cannot say; asked again at most every LEARN_RETRY seconds."""
    known = str(binding.credentials.get("bot_user_id", ""))
    if known:
        return known
    if not _ask_due(binding):  # asked lately, by this task or another
        saved = ChannelBinding.objects.filter(pk=binding.pk).values_list("credentials", flat=True).first()
        return str((saved or {}).get("bot_user_id", ""))
    try:
        answer = platform_client().post(f"{settings.SLACK_API_BASE.rstrip('/')}/auth.test",
                                        headers={"Authorization": f"Bearer {binding.credentials.get('bot_token', '')}"})
        data = answer.json() if answer.status_code == 200 else {}
    except Exception as exc:  # its kind only: the text may quote the request
        logger.warning("Slack auth.test failed for binding %s: %s", binding.pk, type(exc).__name__)
        return ""
    user = str(data.get("user_id") or "") if isinstance(data, dict) and data.get("ok") else ""
    if not user:
        logger.warning("Slack did not name the bot user of binding %s; set its bot_user_id", binding.pk)
        return ""
    with transaction.atomic():
        fresh = ChannelBinding.objects.select_for_update().get(pk=binding.pk)
        if not fresh.credentials.get("bot_user_id"):
            fresh.credentials = {**fresh.credentials, "bot_user_id": user}
            fresh.save(update_fields=["credentials", "updated_at"])
    binding.credentials = {**binding.credentials, "bot_user_id": user}
    return user


LEARN_RETRY = 300

# The mark only spares Slack's API a call: with the cache away (Redis down) the bot is
# asked of Slack for each message that needs it until it is learned, and the message is
# handled as ever.
_learn_away = RepeatedFailure(logger, "Slack bot ids being learned cannot be marked in the cache; "
                                      "each is asked of Slack")


def _ask_due(binding: ChannelBinding) -> bool:
    return cache_or(True, lambda: cache.add(f"slack-bot-learn:{binding.pk}", 1, LEARN_RETRY), away=_learn_away)


# The largest body of Slack's URL check (url_verification: a token, a challenge and its
# type) taken without an app id; Slack's own is under 200 bytes.
URL_CHECK_MAX_BYTES = 1024


def _candidates(kind: str, app_id: str) -> list[ChannelBinding] | None:
    """The enabled Slack bindings a request may be for: the app's, or (with no app id) all;
    None when there is none (not cached, so a binding made elsewhere is found at once)."""
    candidates = ChannelBinding.objects.select_related("tenant", "qor").filter(kind=kind, enabled=True)
    if app_id:
        candidates = candidates.filter(lookup_key=app_id)
    return list(candidates) or None
