"""The socket of a webchat visitor. Its own module because a visitor is let in by the embed
(channels_app.webchat), not by a sign-in: the socket lasts as long as what let them in."""
from __future__ import annotations

from channels.db import database_sync_to_async

from ..chat import ChatOwner
from ..live_auth import webchat_auth_group
from .live_chat import LiveChatConsumer


class WebchatConsumer(LiveChatConsumer):
    """`/ws/webchat/<public key>/?visitor=<token>`: a visitor of the embed on a tenant's site.
    The socket lives as long as what let the visitor in: the embed's binding (enabled, the
    workspace's webchat switch on), their membership or their anonymous identity (not
    denied), their token (not expired)."""

    follows_sign_in = True

    async def authorize(self) -> ChatOwner | None:
        token = self.query().get("visitor", "")
        if not token:
            return None
        return await database_sync_to_async(self._visitor)(token)

    def _visitor(self, token: str) -> ChatOwner | None:
        from ..webchat import WebchatRefused, webchat_visitor

        try:
            visitor = webchat_visitor(public_key=self.scope["url_route"]["kwargs"]["key"], token=token, create=False)
        except WebchatRefused:
            return None
        return visitor.owner if visitor is not None else None

    def signed_in(self) -> bool:
        owner = self.owner
        now = self._visitor(self.query().get("visitor", "")) if owner is not None else None
        return now is not None and owner is not None and now.user.pk == owner.user.pk

    def more_auth_groups(self, owner: ChatOwner) -> tuple[str, ...]:
        return (webchat_auth_group(owner.tenant.pk),)
