"""`qorven doctor`'s check of each Qor's model: one real one-word completion on its main route."""
from __future__ import annotations

from collections.abc import Iterator

from qorven.runtime.environment import url_without_credentials

from .check import Check


def model_checks() -> Iterator[Check]:
    from qorven.llm import ModelError, provider_for, route_for
    from tenancy.access import tenant_serving
    from tenancy.models import Qor

    for qor in Qor.objects.select_related("tenant").order_by("tenant__slug", "slug"):
        subject = f"{qor.tenant.slug}/{qor.slug}"
        if not tenant_serving(qor.tenant):  # not served: no call on its route and key until it is resumed
            yield Check("model", subject, True, "workspace suspended: not asked")
            continue
        route = route_for(qor, "main")
        if route.offline:
            yield Check("model", subject, False, "no model configured: the offline provider answers",
                        "run `qorven setup` (it asks for the model server and checks it), or set OPENAI_BASE_URL, "
                        "OPENAI_API_KEY and QORVEN_MODEL (or the Qor's model in the admin)")
            continue
        # A stored URL may carry `user:password@` (a proxy in front of the model server):
        # doctor's output is pasted into issues and chats.
        where = f"{route.model} at {url_without_credentials(route.base_url)}"
        if route.from_qor:
            from qorven.runtime.outbound_transport import proxy_for

            proxy = proxy_for(route.base_url)
            where += f" through the proxy {proxy}" if proxy else ""
        try:
            provider_for(route).complete(messages=[{"role": "user", "content": "Reply with one word: ok"}])
        except ModelError as exc:
            yield Check("model", subject, False, f"{where}: {exc.summary()}",
                        "check that the server is up, the model name and the API key")
            continue
        yield Check("model", subject, True, f"{where} answers")
