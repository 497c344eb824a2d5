from __future__ import annotations


class ProviderUnavailable(Exception):
    """The model server could not answer (down, rate limited past our retries, deadline hit,
    or refused the request). The user's message stays stored; it can be answered later."""


class ContextLengthExceeded(Exception):
    """The prompt did not fit the model's context window."""
