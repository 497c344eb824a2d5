"""WebSockets of the live surfaces. They authenticate, join server-named groups of the one
chat their user owns, catch the client up from the database, and forward events; the
reading and writing is in channels_app.chat.

Protocol (server → client, one JSON object per frame):

- `{"type": "session", "session_id": id | null, "reset": bool}` — the session being
  watched; sent on connect and whenever the chat moves to a new session (/clear,
  compaction). `reset`: the client should drop what it shows (another session, or too far
  behind to catch up message by message) and show what follows.
- `{"type": "message.new", "seq", "role", "content", "channel", "sender_name",
  "created_at", "notice", "reply_to", "hidden", "answer_state", "delivery"?, "streamed"?}` — each
  message once, in seq order. First the ones after the client's `last_seq` from the
  database, then live ones; a gap in the live stream (a dropped event) is filled from the
  database, so none is lost. `answer_state`: pending, answered or failed for a user
  message, null otherwise; `delivery`: `{"state": "failed", "platform"}` on a reply that
  could not be delivered to its platform; `streamed` on a reply: whether this client was
  shown its text as it streamed.
- `{"type": "message.answer", "seq", "answer_state"}` — a user message's answer failed,
  or waits again after /retry; `{"type": "message.delivery", "seq", "delivery"}` — a
  reply's delivery failed; `{"type": "message.transcribed", "seq", "content", "voice"}` — a
  voice note was heard (`voice`: transcript) or could not be (failed): `content` is its
  text now; `{"type": "message.regenerating", "reply_to", "superseded"}` —
  the answer to `reply_to` is being written again: the replies at the `superseded` seqs
  are no longer shown (a reload sends them `hidden`).
- `{"type": "message.stream", "reply_to", "text"}` — the reply streamed so far (after a
  reconnect, or after a missed chunk); `{"type": "message.chunk", "reply_to", "delta",
  "offset"}` — the next piece; `{"type": "message.done", "reply_to", "seq"}`.
- `{"type": "pong"}` answers `{"type": "ping"}`; `{"type": "error", "error"}` answers a
  frame that is not a JSON document (too deep, a lone surrogate, binary).
- `{"type": "signed_out"}`, then a close with code 4401: the sign-in behind the socket
  ended (sign-out in another tab, a password change, a revoked token, removal from the
  tenant; see channels_app.live_auth). The client should ask the person to sign in again
  rather than reconnect.
- A close with code 1013 (try again later): the server cannot follow the chat just now
  (the Redis behind its live layer is away). The client connects again later and
  catches up by seq; a socket already open when Redis went stays open and is sent what it
  missed once Redis is back.

Connect with `?session=<id>&last_seq=<n>` to resume; without them the client gets the
newest page. Authentication: the Django session cookie, or an API token as
`Authorization: Bearer <token>` or `?token=<token>` (for clients that cannot set headers).

The sockets, by what they do:

- `live_chat`: what every live socket does: connect, catch up from the database, follow
  the chat's events;
- `sign_in`: closing a socket once the sign-in that opened it ends;
- `member_chat`: a member's chat page, the terminal client and API clients
  (`/ws/chat/<tenant>/<qor>/`);
- `visitor_chat`: a visitor of the webchat embed (`/ws/webchat/<public key>/`).
"""
