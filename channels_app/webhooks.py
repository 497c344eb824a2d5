"""`/v1/webhooks/<channel>`: verify, store, answer 200 at once; the rest runs as a task.

`webhook_prepare` is everything before storing — the adapter verifies the request,
resolves its binding, checks the channel switch and parses the messages — and is shared
by the two ways a webhook arrives: Django's view below (WSGI, the test client) and the
lean ASGI path `qorven serve` answers them on (channels_app.webhook_ingest), which stores
the messages of concurrent webhooks in one statement. That path first screens each
webhook on its event loop (`webhook_screen`), from the process's binding cache alone, to
refuse a bad signature before it waits and to count each well-signed one as its binding's
workspace's.
"""
from __future__ import annotations

import logging
import traceback
from dataclasses import dataclass, field

from django.core.exceptions import RequestDataTooBig, SuspiciousOperation
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from qorven.runtime.log_context import one_line
from qorven.runtime.row_cache import NotCached, cached_only
from tenancy.switches import channel_enabled_cached

from .adapters import WebhookRejected, adapter_for
from .adapters.base import Undelivered
from .api_auth import method_refused
from .inbound import InboundMessage
from .json_body import BodyRefused
from .models import ChannelBinding
from .platforms import webhook_bindings
from .receive import inbound_store
from .send_failures import deliveries_undelivered

logger = logging.getLogger(__name__)

OK = {"ok": True}  # the body of a webhook taken
# What an adapter's reading of a well-signed payload raises where a field is not the shape
# it expects (a dict's .get on a string, int() of a word).
UNREADABLE = (AttributeError, KeyError, IndexError, TypeError, ValueError, OverflowError)


@dataclass
class Prepared:
    """What a webhook request comes to: the answer, and the messages to store before it
    is given (none for a refusal, a challenge, or an event that carries no message)."""

    response: HttpResponse | None  # None: the usual {"ok": true} (made once by the lean path)
    binding: ChannelBinding | None = None
    messages: list[InboundMessage] = field(default_factory=list)
    undelivered: list[Undelivered] = field(default_factory=list)  # sent parts the platform reports failed


def undelivered_record(prepared: Prepared) -> None:
    """Record what the platform reports undelivered (rare: done in the request, so a
    failure to record it is an error answer and the platform reports it again)."""
    if prepared.undelivered and prepared.binding is not None:
        deliveries_undelivered(binding=prepared.binding, reports=prepared.undelivered)


def webhook_prepare(channel: str, request: HttpRequest, *, verified: ChannelBinding | None = None) -> Prepared:
    """Verify and parse one webhook request; no platform I/O, no writes. `verified`: the
    binding its screening verified it for (`Screened.verified`), taken as its verdict
    instead of checking the signature again."""
    adapter = adapter_for(channel)
    if adapter is None:
        return Prepared(JsonResponse({"error": f"no channel {channel!r}"}, status=404))
    refused = method_refused(request, adapter.methods)
    if refused is not None:
        return Prepared(refused)
    if request.method == "GET":
        return Prepared(adapter.handle_get(request))
    try:
        binding = verified or adapter.resolve(request)
        if not channel_enabled_cached(tenant=binding.tenant, channel=adapter.kind):
            return Prepared(JsonResponse({"error": f"the {channel} channel is switched off"}, status=404))
    except (WebhookRejected, BodyRefused, SuspiciousOperation) as exc:
        return _refused(channel, exc)
    try:
        parsed = adapter.parse(request, binding)
    except (WebhookRejected, BodyRefused, SuspiciousOperation) as exc:
        return _refused(channel, exc)
    except UNREADABLE as exc:
        # Well signed, but a field of another shape than the platform's documents give it
        # (an event that is a string, a list of numbers): answered 200 as an unknown event
        # is, so the platform stops sending it again; named by where it failed, never by
        # what it holds (a person's message).
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        logger.warning("%s webhook for binding %s ignored: a payload of a shape we do not read (%s at %s:%s)",
                       channel, binding.pk, type(exc).__name__, frame.filename.rsplit("/", 1)[-1], frame.lineno)
        return Prepared(None, binding)
    return Prepared(parsed.response, binding, list(parsed.messages), list(parsed.undelivered))


@dataclass(frozen=True)
class Screened:
    """What a webhook's screening found: the refusal to answer at once, or the id of the
    binding it is signed for (neither: not known here, the storing thread decides), and
    that binding when it was verified against the cache's fresh entry: the verdict the
    storing thread takes instead of checking the signature again."""

    refusal: HttpResponse | None = None
    binding_id: int | None = None
    verified: ChannelBinding | None = None
    tenant_id: int | None = None  # the binding's workspace: whose share of the backlog it takes


def webhook_screen(channel: str, request: HttpRequest) -> Screened:
    """Verify a webhook as webhook_prepare does, from this process's binding cache alone
    (no database: run on the event loop, before the webhook takes a place among those
    waiting to be stored). A request refused with what the cache keeps fresh (no signature,
    a bad one, a body not the platform's) gets the refusal the thread would give it; one
    signed for a binding the cache keeps is that binding's: verified, when its entry is
    fresh (the thread reads the same entry: it takes the verdict and does not compute the
    signature again); past its time, only whose it is (the thread verifies it against the
    binding as it is now). The rest is not known here: a binding not read lately, or nobody's."""
    adapter = adapter_for(channel)
    if adapter is None:
        return Screened(JsonResponse({"error": f"no channel {channel!r}"}, status=404))
    try:
        with cached_only():
            binding = adapter.resolve(request)
        return Screened(binding_id=binding.pk, verified=binding, tenant_id=binding.tenant_id)
    except (WebhookRejected, BodyRefused, SuspiciousOperation) as exc:
        return Screened(_refused(channel, exc).response)
    except NotCached:
        pass
    except Exception:  # not the screen's to answer: the thread prepares it and says what failed
        return Screened()
    try:  # a binding whose entry is past its time: its signature still tells whose the webhook is
        with cached_only(stale=True):
            binding = adapter.resolve(request)
            return Screened(binding_id=binding.pk, tenant_id=binding.tenant_id)
    except Exception:  # not known here (a secret changed since): the thread decides
        return Screened()


# Bindings read as a server process starts, at most: half what the cache keeps, so that
# the bindings read later do not fill it (a full cache forgets everything).
WARM_AT_MOST = 2048


def webhook_bindings_warm() -> int:
    """Read the enabled bindings webhooks name into this process's cache (the most recently
    changed, at most WARM_AT_MOST), in one statement, as a server starts: their first
    webhooks are screened as theirs, not counted with junk until one of them is stored.
    How many were read."""
    bindings = list(ChannelBinding.objects.select_related("tenant", "qor").filter(enabled=True)
                    .order_by("-updated_at")[:WARM_AT_MOST])
    entries: dict = {}
    for kind in {binding.kind for binding in bindings}:
        adapter = adapter_for(kind)
        if adapter is not None:
            entries.update(adapter.cache_entries([b for b in bindings if b.kind == kind]))
    webhook_bindings.fill(entries)
    return len(bindings)


def _refused(channel: str, exc: WebhookRejected | BodyRefused | SuspiciousOperation) -> Prepared:
    return Prepared(_refusal(channel, exc))


def _refusal(channel: str, exc: WebhookRejected | BodyRefused | SuspiciousOperation) -> HttpResponse:
    # Anyone may post here: what the refusal quotes of the request (the addresses an
    # email's To names) is written on the one line.
    if isinstance(exc, SuspiciousOperation):
        # A form Django will not read (more fields than DATA_UPLOAD_MAX_NUMBER_FIELDS, a
        # body past DATA_UPLOAD_MAX_MEMORY_SIZE): a bad request, as Django's handler
        # answers it, not a failure of ours with its traceback.
        logger.info("%s webhook body refused: %s", channel, type(exc).__name__)
        return JsonResponse({"error": "the body is not a form we read"},
                            status=413 if isinstance(exc, RequestDataTooBig) else 400)
    if isinstance(exc, WebhookRejected):
        logger.info("%s webhook rejected: %s", channel, one_line(str(exc.detail or exc)))
    else:
        logger.info("%s webhook body refused: %s", channel, one_line(str(exc)))
    return JsonResponse({"error": str(exc)}, status=exc.status)


@csrf_exempt
def webhook(request: HttpRequest, channel: str) -> HttpResponse:
    prepared = webhook_prepare(channel, request)
    if prepared.messages:
        inbound_store(items=[(prepared.binding, message) for message in prepared.messages])
    undelivered_record(prepared)
    return prepared.response or JsonResponse(OK)
