"""A person's own timezone in a workspace, read and set from the chat page (signed in,
CSRF-protected: `chat/api/<tenant>/<qor>/timezone`) and the JSON API (bearer token:
`/v1/timezone`). Only ever the caller's own membership in the page's (or the token's)
tenant; the answers are `/timezone`'s own words (tenancy.person_timezone)."""
from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from tenancy.errors import NotFound
from tenancy.models import Tenant
from tenancy.person_timezone import ZoneUnknown, zone_change, zone_json, zones_offered

from .api_auth import bearer_required, json_error, json_methods
from .json_body import BodyRefused, json_body
from .views import member_json_view

EXAMPLE = '{"timezone": "Europe/Paris"}'


@member_json_view("GET", "PUT")
def chat_timezone_view(request: HttpRequest, owner) -> JsonResponse:
    """GET: the person's timezone here, and the names to pick from (`zones`). PUT
    `{"timezone": "Europe/Paris"}` (`""` follows the workspace's): make it theirs."""
    if request.method == "GET":
        return JsonResponse({**zone_json(tenant=owner.tenant, user=owner.user), "zones": zones_offered()})
    return _set(request, tenant=owner.tenant, user=owner.user)


@csrf_exempt
@json_methods("GET", "PUT")
@bearer_required
def api_timezone(request: HttpRequest) -> HttpResponse:
    """GET: the caller's timezone in the token's tenant; PUT `{"timezone": …}` sets it. A
    token speaks for one tenant: `?tenant=` naming another is not found, like a missing one."""
    tenant: Tenant = request.tenant  # type: ignore[attr-defined]
    asked = request.GET.get("tenant") or tenant.slug
    if asked != tenant.slug:
        return json_error(404, f"no tenant {asked!r}")
    if request.method == "GET":
        return JsonResponse(zone_json(tenant=tenant, user=request.user))  # type: ignore[arg-type]
    return _set(request, tenant=tenant, user=request.user)  # type: ignore[arg-type]


def _set(request: HttpRequest, *, tenant: Tenant, user: User) -> JsonResponse:
    try:
        body: Any = json_body(request)
    except BodyRefused as exc:
        return json_error(exc.status, str(exc))
    if not isinstance(body, dict) or "timezone" not in body:
        return json_error(400, f"send the timezone as {EXAMPLE} (\"\" follows the workspace's)")
    asked = body["timezone"]
    if asked is None:
        asked = ""
    if not isinstance(asked, str):
        return json_error(400, '"timezone" must be an IANA name such as "Europe/Paris", or "" for the workspace\'s')
    try:
        changed = zone_change(tenant=tenant, user=user, asked=asked)
    except ZoneUnknown as exc:
        return json_error(400, str(exc))
    except NotFound:
        return json_error(404, "only members of this workspace have a timezone here")
    return JsonResponse({**zone_json(tenant=tenant, user=user, message=changed.message),
                         "beats_moved": changed.beats_moved})
