from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError

from tenancy.errors import NotFound
from tenancy.selectors import tenant_get, usage_month


class Command(BaseCommand):
    help = (
        "Print this month's model token usage of a tenant, per Qor and role (main, summarizer, "
        "heartbeat), with the monthly budget if one is set."
    )

    def add_arguments(self, parser):
        parser.add_argument("--tenant", required=True, help="tenant slug")

    def handle(self, *args, **opts):
        from rich.console import Console
        from rich.table import Table

        try:
            tenant = tenant_get(slug=opts["tenant"])
        except NotFound as exc:
            raise CommandError(str(exc)) from None
        rows = usage_month(tenant=tenant)
        if not rows:
            self.stdout.write(f"No model tokens recorded for {tenant.slug} this month: replies so far came from the "
                              "offline provider (no model configured) or none were sent. `qorven doctor` checks the "
                              "model of each Qor.")
            return
        table = Table(title=f"Model usage of {tenant.slug} this month")
        for column in ("qor", "role", "calls", "prompt tokens", "completion tokens", "total"):
            table.add_column(column, justify="left" if column in ("qor", "role") else "right")
        total = 0
        for row in rows:
            row_total = row["prompt_tokens"] + row["completion_tokens"]
            total += row_total
            table.add_row(row["qor__slug"], row["role"], str(row["calls"]), str(row["prompt_tokens"]),
                          str(row["completion_tokens"]), str(row_total))
        budget = tenant.monthly_token_budget
        table.caption = f"total {total} tokens" + (f" of a {budget} budget" if budget is not None else "")
        Console(file=self.stdout, width=110, force_terminal=False).print(table)
