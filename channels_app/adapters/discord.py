"""Discord: DMs and mentions arrive over the Gateway (`qorven discord-gateway`), the `/ask`
slash command over the Interactions endpoint; replies go out through the REST API.

Interactions are signed with Ed25519 over `X-Signature-Timestamp` + body, checked with the
application's public key; the binding is named by `application_id`. A PING is answered
with a PONG; `/ask` is deferred at once and answered with a follow-up message.
Credentials: `application_id`, `public_key`, `bot_token`.
"""
from __future__ import annotations

import logging
import time
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from django.conf import settings
from django.http import HttpRequest, JsonResponse

from ..formatting import DISCORD_MARKDOWN
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
    checked_media,
    download_limited,
    media_url_allowed,
    proof_answer,
    send_unreachable,
)
from .discord_asks import DM, FOLLOWUP, GROUP, PRIVATE, SERVER, Ask, ask_of, ask_target, late_header

logger = logging.getLogger(__name__)

PING, APPLICATION_COMMAND = 1, 2
PONG, DEFERRED_CHANNEL_MESSAGE = 1, 5
PRIVATE_CHANNEL = 2  # an interaction's context: a group DM, or a DM between people
GROUP_DM = 3  # a channel's type
# What Discord answers a bot posting where it is not let in: a chat it is no member of (a
# group DM, a server the app was not added to; 403) or cannot see (404).
NOT_LET_IN = (403, 404)
# What Discord answers a bot token it does not take (revoked, reset, mistyped).
BOT_REFUSED = (401,)
# Its codes, with a 403 to the bot, for a chat closed to it: one it cannot see (Missing
# Access), may not post in (Missing Permissions), or a person's DMs (Cannot send messages
# to this user: they share no server with the bot, or turned its DMs off).
CHAT_REFUSED = frozenset({50001, 50013, 50007})


STAMP_WINDOW = 300  # seconds a signed interaction stays acceptable, as Slack's
# The answer to a bad signature (Discord's documents ask for a 401), and to an application
# id not bound here alike: the interaction names its application in the clear, and two
# answers would tell anyone whether it is bound on this server (the log tells them apart).
FORGED = (401, "bad Discord signature")

class DiscordAdapter(Adapter):
    kind = "discord"
    limit = 2000
    style = DISCORD_MARKDOWN
    groups = True
    credentials = {
        "application_id": "the application id",
        "public_key": "the application's public key (hex), for interaction signatures",
        "bot_token": "the bot token",
    }
    required = ("application_id", "public_key", "bot_token")

    def lookup_key(self, credentials: dict[str, str]) -> str:
        return credentials["application_id"]

    def account_proof(self, credentials: dict[str, str]) -> AccountProblem | None:
        """The bot token's application (/applications/@me) must be the one interactions
        name (`application_id`), and its verify key the public key given, or no
        interaction would pass the signature check."""
        app_id = self.lookup_key(credentials)
        try:
            app = proof_answer("Discord", "GET", f"{settings.DISCORD_API_BASE.rstrip('/')}/applications/@me",
                               refused="Discord did not accept this bot token.",
                               headers={"Authorization": f"Bot {credentials.get('bot_token', '')}"})
        except ProofFailed as exc:
            return exc.problem
        if not isinstance(app, dict) or str(app.get("id", "")) != app_id:
            return AccountProblem(f"This bot token is not the bot of the Discord application {app_id}.")
        key = str(app.get("verify_key") or "")
        if key and key.lower() != credentials.get("public_key", "").strip().lower():
            return AccountProblem(f"The public key is not the Discord application {app_id}'s.")
        return None

    # --- Interactions endpoint ---
    def resolve(self, request: HttpRequest) -> ChannelBinding:
        signature = request.headers.get("X-Signature-Ed25519", "")
        stamp = request.headers.get("X-Signature-Timestamp", "")
        if not signature or not stamp:
            raise WebhookRejected(401, "missing Discord signature headers")
        try:
            app_id = str(json_body(request).get("application_id") or "")
        except (ValueError, AttributeError):
            raise WebhookRejected(400, "body is not Discord JSON") from None
        binding = self.enabled_binding(app_id)
        try:
            key = Ed25519PublicKey.from_public_bytes(bytes.fromhex(str(binding.credentials.get("public_key", ""))))
            key.verify(bytes.fromhex(signature), stamp.encode() + request.body)
        except (ValueError, InvalidSignature):
            raise WebhookRejected(*FORGED) from None
        try:
            age = abs(time.time() - int(stamp))
        except ValueError:
            raise WebhookRejected(401, "bad Discord signature timestamp") from None
        if age > STAMP_WINDOW:  # a signed request replayed later
            raise WebhookRejected(401, "Discord signature timestamp outside the 5-minute window")
        return binding

    def unbound(self, named: str) -> WebhookRejected:
        return WebhookRejected(*FORGED, detail=f"no discord binding for application {named or '(none)'}")

    def parse(self, request: HttpRequest, binding: ChannelBinding) -> Parsed:
        body = json_body(request)
        if body.get("type") == PING:
            return Parsed([], JsonResponse({"type": PONG}))
        if body.get("type") != APPLICATION_COMMAND or (body.get("data") or {}).get("name") != "ask":
            return Parsed([], JsonResponse({"type": 4, "data": {"content": "Unknown command.", "flags": 64}}))
        options = {o.get("name"): o.get("value") for o in (body.get("data") or {}).get("options") or []}
        question = str(options.get("question") or options.get("text") or "").strip()
        user = (body.get("member") or {}).get("user") or body.get("user") or {}
        # An app people install on their own account is asked in any chat they are in: only
        # a DM with the bot (context 1) is their own; a server's channel (0), a group DM or a
        # DM with someone else (2) is read by others, so it is a group chat of its own.
        shared = bool(body.get("guild_id")) or body.get("context") == PRIVATE_CHANNEL
        message = InboundMessage(
            channel="discord" if shared else "discord_dm",
            external_id=f"interaction:{body.get('id')}",
            sender_id=str(user.get("id", "")),
            sender_name=str(user.get("global_name") or user.get("username") or ""),
            text=question or "(empty question)",
            group=shared, thread_id=str(body.get("channel_id", "")) if shared else "",
            addressed=True,
            # The chat, the asker and the question are named too: an answer later than the
            # token's 15 minutes goes to the chat, or to the asker, saying what it answers.
            reply_target=ask_target(
                channel=str(body.get("channel_id") or ""), token=str(body.get("token") or ""),
                asker=str(user.get("id", "")), question=question,
                place=_place(body, shared)),
        )
        return Parsed([message], JsonResponse({"type": DEFERRED_CHANNEL_MESSAGE}))

    # --- Gateway ---
    def from_gateway(self, binding: ChannelBinding, event: dict[str, Any], bot_user_id: str) -> InboundMessage | None:
        """A Gateway MESSAGE_CREATE payload (`d`) as an InboundMessage, or None to ignore."""
        author = event.get("author") or {}
        media = [InboundMedia(kind="file", file_id=str(a.get("id") or ""), mime_type=str(a.get("content_type") or ""),
                              size=int(a.get("size") or 0) or None, name=str(a.get("filename") or ""),
                              url=str(a.get("url") or ""))
                 for a in (event.get("attachments") or [])[:4] if isinstance(a, dict) and a.get("url")]
        if author.get("bot") or not (event.get("content") or media) or not event.get("id"):
            return None
        guild = event.get("guild_id")
        mentioned = any(str(m.get("id")) == bot_user_id for m in event.get("mentions") or [])
        referenced = ((event.get("referenced_message") or {}).get("author") or {}).get("id")
        channel_id = str(event.get("channel_id", ""))
        return InboundMessage(
            channel="discord" if guild else "discord_dm",
            external_id=str(event["id"]),
            sender_id=str(author.get("id", "")),
            sender_name=str(author.get("global_name") or author.get("username") or ""),
            text=str(event.get("content") or ""),
            group=bool(guild), thread_id=channel_id if guild else "",
            addressed=(not guild) or mentioned or str(referenced) == bot_user_id,
            reply_target=channel_id, media=media,
        )

    def fetch_media(self, binding: ChannelBinding, media: InboundMedia) -> InboundImage | None:
        """An attachment from Discord's CDN (its URLs are signed; no token is sent)."""
        limit = settings.QORVEN_MAX_UPLOAD
        if not media.url or not media_url_allowed(media.url, hosts=(".discordapp.com", ".discordapp.net"),
                                                  api_base=settings.DISCORD_API_BASE):
            logger.warning("a Discord attachment on binding %s names no URL of Discord's; not fetched", binding.pk)
            return None
        if media.size is not None and media.size > limit:
            logger.warning("a Discord attachment on binding %s is too big to keep (%s bytes)", binding.pk, media.size)
            return None
        try:
            with self.http() as client:
                content = download_limited(client, media.url, limit=limit)
        except Exception as exc:  # the text still counts
            logger.warning("could not fetch a Discord attachment on binding %s: %s", binding.pk, type(exc).__name__)
            return None
        if content is None:
            logger.warning("a Discord attachment on binding %s is too big to keep", binding.pk)
            return None
        return checked_media(binding, media, content, "Discord")

    # --- REST ---
    def target_lasts(self, target: str) -> bool:
        return not target.startswith(FOLLOWUP)  # an interaction's token lapses in 15 minutes

    def withdraw(self, binding: ChannelBinding, target: str) -> None:
        """The deferred response to an /ask that gets no answer (Discord shows the bot
        thinking until it is followed up, up to 15 minutes), deleted: the thinking goes,
        and nothing is said."""
        if not target.startswith(FOLLOWUP):
            return
        url = (f"{settings.DISCORD_API_BASE.rstrip('/')}/webhooks/{binding.lookup_key}/"
               f"{interaction_of(target)[1]}/messages/@original")
        try:
            with self.http() as client:
                response = client.delete(url)
        except Exception as exc:  # its kind only: the URL holds the interaction's token
            logger.warning("could not withdraw a Discord interaction on binding %s: %s", binding.pk,
                           type(exc).__name__)
            return
        if response.status_code >= 300:
            logger.warning("Discord did not withdraw an interaction on binding %s: HTTP %s", binding.pk,
                           response.status_code)

    def send(self, binding: ChannelBinding, target: str, text: str) -> str:
        """A follow-up to an /ask (its interaction's token), else a message in a channel.
        Discord refuses a token after 15 minutes (401, Invalid Webhook Token): an answer
        that came later (a slow model, a queue) is posted elsewhere (`_late_answer`)."""
        if not target.startswith(FOLLOWUP):
            return self._post(binding, target, text)
        ask = ask_of(target)
        url = f"{settings.DISCORD_API_BASE.rstrip('/')}/webhooks/{binding.lookup_key}/{ask.token}"
        try:
            return self._post(binding, ask.channel, text, url=url)
        except SendError as exc:
            if exc.status != 401 or not (ask.channel or ask.asker):
                raise
        logger.info("an /ask's token on binding %s has lapsed; its answer is posted instead", binding.pk)
        return self._late_answer(binding, target, ask, text)

    def _late_answer(self, binding: ChannelBinding, target: str, ask: Ask, text: str) -> str:
        """An /ask's answer (one part of it) after its token lapsed: posted in the chat it
        was asked in, mentioning the asker — and only them — with the question quoted, for
        everyone there to place it. Where the bot cannot post (a group DM, which a bot is
        never a member of; a server the app was not added to), it goes to the asker's DM
        with the bot, saying which /ask it answers. The first part sent says so; the rest
        follow it."""
        from ..one_off_targets import nothing_sent_to

        first = nothing_sent_to(binding, target)
        if ask.channel and ask.bot_chat:
            header = late_header(ask, in_dm=False) if first else ""
            try:
                return self._post(binding, ask.channel, text, header=header, mention=ask.asker if header else "")
            except SendError as exc:
                if exc.status not in NOT_LET_IN or not ask.asker:
                    raise
            logger.info("a late /ask answer on binding %s cannot be posted in its chat; it goes to the asker",
                        binding.pk)
        if not ask.asker:
            raise SendError("a late /ask answer has no chat to be posted in", permanent=True)
        dm = self._dm_channel(binding, ask.asker)
        return self._post(binding, dm, text, header=late_header(ask, in_dm=True) if first else "")

    def _dm_channel(self, binding: ChannelBinding, user_id: str) -> str:
        """The bot's DM channel with a user (Discord opens it, or gives the one open)."""
        url = f"{settings.DISCORD_API_BASE.rstrip('/')}/users/@me/channels"
        try:
            with self.http() as client:
                response = client.post(url, json={"recipient_id": user_id}, headers=self._bot_auth(binding))
        except Exception as exc:
            raise send_unreachable("Discord", exc) from None
        self.raise_for_status(response, account=BOT_REFUSED)
        channel = self.accepted_id(response, "id")
        if not channel.isdigit():
            raise SendError("Discord opened no DM channel", permanent=False)
        return channel

    @staticmethod
    def _bot_auth(binding: ChannelBinding) -> dict[str, str]:
        return {"Authorization": f"Bot {binding.credentials.get('bot_token', '')}"}

    def _post(self, binding: ChannelBinding, channel: str, text: str, *, url: str = "", header: str = "",
              mention: str = "") -> str:
        """One message: in `channel` as the bot, or to an interaction's webhook `url`.
        `header`, a line before the text (its own message when both would pass the limit:
        the text failing then, the SendError says the part is begun, so that its retry
        sends the text alone, as it was tried); `mention`, the one user it may notify."""
        if header and len(header) + 1 + len(text) > self.limit:
            begun = self._post(binding, channel, header, url=url, mention=mention)
            try:
                return self._post(binding, channel, text, url=url)
            except SendError as exc:
                exc.begun_id = begun
                raise
        url_given = bool(url)
        headers = {} if url else self._bot_auth(binding)
        url = url or f"{settings.DISCORD_API_BASE.rstrip('/')}/channels/{channel}/messages"
        # Mentions the model wrote (@everyone, a role, a user) notify nobody.
        allowed: dict[str, list[str]] = {"parse": [], **({"users": [mention]} if mention else {})}
        try:
            with self.http() as client:
                response = client.post(url, json={"content": f"{header}\n{text}" if header else text,
                                                  "allowed_mentions": allowed}, headers=headers)
        except Exception as exc:
            raise send_unreachable("Discord", exc) from None
        retry_after = None
        if response.status_code == 429:
            try:
                retry_after = float(response.json().get("retry_after"))
            except (ValueError, TypeError, AttributeError):
                retry_after = None
        # A 401 on an interaction's webhook is that /ask's lapsed token (send), not the bot's.
        chat = not url_given and response.status_code == 403 and self.error_code(response, "code") in CHAT_REFUSED
        self.raise_for_status(response, retry_after=retry_after, account=() if url_given else BOT_REFUSED, chat=chat)
        return self.accepted_id(response, "id")


def _place(body: dict[str, Any], shared: bool) -> str:
    """What kind of chat an /ask was asked in (channels_app.adapters.discord_asks)."""
    if body.get("guild_id"):
        return SERVER
    if not shared:
        return DM
    return GROUP if (body.get("channel") or {}).get("type") == GROUP_DM else PRIVATE


def interaction_of(target: str) -> tuple[str, str]:
    """(channel id, interaction token) of a follow-up target (channels_app.adapters.discord_asks);
    the channel is "" in one stored before it was named (`followup:<token>`)."""
    ask = ask_of(target)
    return ask.channel, ask.token
