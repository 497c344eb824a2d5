"""The socket of a member's chat: the chat page, the terminal client (surface `tui`) and API
clients. Its own module because a member proves who they are in two ways (the session
cookie, an API token) and stays signed in only while the one they used holds."""
from __future__ import annotations

from channels.db import database_sync_to_async

from sessions_app.channel_kinds import Channel
from tenancy.errors import NotFound
from tenancy.selectors import api_token_authenticate

from ..chat import ChatOwner, chat_owner
from ..live_auth import socket_signed_in
from .live_chat import LiveChatConsumer


class ChatConsumer(LiveChatConsumer):
    """`/ws/chat/<tenant>/<qor>/`: the chat page (and any API client) of a member."""

    follows_sign_in = True

    async def authorize(self) -> ChatOwner | None:
        kwargs = self.scope["url_route"]["kwargs"]
        user = self.scope.get("user")
        raw = self._bearer() or self.query().get("token", "")
        self.token_raw = raw
        session = self.scope.get("session")
        self.session_key_at_open = None if raw or session is None else session.session_key
        if raw:
            token = await database_sync_to_async(api_token_authenticate)(raw=raw)
            if token is None or token.tenant.slug != kwargs["tenant"]:
                return None
            user = token.user
        if user is None or not user.is_authenticated:
            return None
        # The surface the client writes on (the terminal client: tui), whose session it
        # follows in legacy mode; the page's is web.
        surface = self.query().get("surface") or Channel.WEB
        if surface not in (Channel.WEB, Channel.TUI):
            return None
        try:
            return await database_sync_to_async(chat_owner)(
                user=user, tenant_slug=kwargs["tenant"], qor_slug=kwargs["qor"], surface=surface
            )
        except NotFound:
            return None

    def signed_in(self) -> bool:
        kwargs = self.scope["url_route"]["kwargs"]
        owner = self.owner
        if owner is None:
            return False
        return socket_signed_in(user_id=owner.user.pk, tenant_slug=kwargs["tenant"], qor_slug=kwargs["qor"],
                                session_key=self.session_key_at_open, token=self.token_raw or None)

    def _bearer(self) -> str:
        for name, value in self.scope.get("headers", []):
            if name == b"authorization":
                scheme, _, raw = value.decode("latin-1").partition(" ")
                if scheme.lower() == "bearer":
                    return raw.strip()
        return ""
