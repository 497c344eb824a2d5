"""Run Qorven's benchmarks and print one combined table.

Usage: ``python bench/run.py [--quick] [NAME ...]``

Every ``bench/*.py`` except this file and files starting with ``_`` is a benchmark
(``migrations`` runs only when named). Each
runs as its own subprocess (the project's venv python, cwd = project root) and speaks a
small protocol: human progress goes to stderr (passed straight through), and the last
line it prints to stdout is one JSON object::

    {"bench": "append_read", "rows": [{...}, ...], "notes": ["...", ...]}

``rows`` become lines of the combined table (columns are the union of the rows' keys);
``notes`` (optional) are printed under it. ``--quick`` is passed through to every
benchmark (smaller sizes, for a smoke run). A benchmark that exits non-zero or prints no
result line is reported as failed in the table, the others still run, and this script
then exits 1.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
VENV_PYTHON = ROOT / ".venv" / "bin" / "python"


@dataclass
class Outcome:
    """What one benchmark run produced."""

    name: str
    status: str = "ok"
    seconds: float = 0.0
    rows: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return self.status != "ok"


# Run only when named (minutes at full size, and not a figure of the running product).
ON_ITS_OWN = {"migrations"}


def discover() -> list[str]:
    """Names of the benchmarks in bench/, sorted."""
    scripts = BENCH_DIR.glob("*.py")
    return sorted(p.stem for p in scripts if p.name != "run.py" and not p.name.startswith("_"))


def run_one(name: str, quick: bool) -> Outcome:
    """Run one benchmark and parse its result line."""
    python = str(VENV_PYTHON if VENV_PYTHON.exists() else Path(sys.executable))
    cmd = [python, str(BENCH_DIR / f"{name}.py"), *(["--quick"] if quick else [])]
    print(f"[run] {name}: {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    outcome = Outcome(name, seconds=time.perf_counter() - started)
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    try:
        result = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        result = None
    if isinstance(result, dict):
        outcome.rows = [row for row in result.get("rows", []) if isinstance(row, dict)]
        outcome.notes = [str(note) for note in result.get("notes", [])]
    if proc.returncode != 0:
        outcome.status = f"FAILED (exit {proc.returncode})"
    elif not isinstance(result, dict):
        outcome.status = "FAILED (no JSON result line)"
    return outcome


def fmt(value: Any) -> str:
    """Render a cell: thousands separators for big numbers, a few decimals for small ones."""
    if isinstance(value, bool) or value is None:
        return "" if value is None else str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if abs(value) >= 100:
            return f"{value:,.0f}"
        return f"{value:.2f}" if abs(value) >= 1 else f"{value:.3f}"
    return str(value)


# Row fields that say which case a row measures; every other field is a figure.
CASE_FIELDS = ("db", "size", "messages", "users", "memories", "clients", "jobs", "mode", "method", "layout", "figure")


def render(outcomes: list[Outcome], console: Console) -> None:
    """Print one table, a line per figure (bench, case, figure, value), then the notes.

    Long rather than wide: benchmarks report different figures, and a column per figure
    across all of them does not fit a terminal."""
    table = Table(title="Qorven benchmarks", header_style="bold")
    for column, justify in (("bench", "left"), ("case", "left"), ("figure", "left"), ("value", "right")):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for outcome in outcomes:
        style = "red" if outcome.failed else None
        if not outcome.rows:
            table.add_row(outcome.name, "", "status", outcome.status, style=style)
        for row in outcome.rows:
            case = ", ".join(f"{k}={fmt(row[k])}" for k in CASE_FIELDS if k in row)
            first = True
            for key, value in row.items():
                if key in CASE_FIELDS or key == "bench" or value is None:  # None: no such figure here
                    continue
                table.add_row(outcome.name if first else "", case if first else "", key, fmt(value), style=style)
                first = False
        table.add_section()
    console.print(table)
    for outcome in outcomes:
        console.print(f"[bold]{outcome.name}[/bold] ({outcome.seconds:.0f} s, {outcome.status})")
        for note in outcome.notes:
            console.print(f"  {note}", markup=False, highlight=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="benchmarks to run (default: all)")
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    args = parser.parse_args(argv)
    available = discover()
    unknown = [n for n in args.names if n not in available]
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; have {', '.join(available)}")
    outcomes = [run_one(name, args.quick) for name in args.names or [n for n in available if n not in ON_ITS_OWN]]
    console = Console()
    render(outcomes, console if console.is_terminal else Console(width=200))
    return 1 if any(o.failed for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
