"""The map of the house (README, "Architecture"), checked on the source itself: every
import of the project's own modules points down the layers, so no two packages import
each other. The graph is built with `ast` from the files, so an import inside a function
counts as much as one at the top; imports only for type checkers (`if TYPE_CHECKING:`)
never run and are left out."""
from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Lowest first: a unit may import the units before it, never one after it.
LAYERS = [
    "qorven.runtime",  # machinery: embedded worker, channel layer, publisher, stream cache
    "tenancy",  # tenants, Qors, trust, switches, the registries
    "qorven.llm",  # model providers and routes
    "sessions_app",  # the conversation store
    "memory_app",  # memories, skills, summarizer
    "heartbeats_app",  # beats, their schedule and tools (a run is the agent's: a sub-agent turn)
    "qorven.agent",  # one turn: routing, prompt, the tool loop, a heartbeat's run
    "legacy_app",  # import-legacy, collapse-sessions
    "channels_app",  # the edges: platforms, webhooks, sockets, terminal
    "qorven",  # wiring: settings, asgi, urls, the Celery app, the CLI
]
SUBPACKAGES = ("qorven.runtime", "qorven.llm", "qorven.agent")


def parse(path: Path) -> ast.Module:
    """The file's syntax tree. CPython 3.11.7 keeps one AST recursion counter for the whole
    interpreter, so a parse in another thread of this test process (a server or worker an
    earlier test left running) can make this one raise a spurious SystemError ("AST
    constructor recursion depth mismatch", CPython gh-106905, fixed in 3.11.8): parsed
    again then, never passed over."""
    source = path.read_text()
    for _ in range(3):
        try:
            return ast.parse(source, filename=str(path))
        except SystemError as exc:
            if "recursion depth mismatch" not in str(exc):
                raise
            error = exc
    raise error


def unit_of(module: str) -> str | None:
    for sub in SUBPACKAGES:
        if module == sub or module.startswith(sub + "."):
            return sub
    top = module.split(".", 1)[0]
    return top if top in LAYERS else None


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def runtime_imports(tree: ast.AST, module: str, is_package: bool) -> list[tuple[str, int]]:
    """(imported module, line) for every import that can run, skipping TYPE_CHECKING blocks."""
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.extend((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.append((target, node.lineno))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def import_edges() -> dict[tuple[str, str], list[str]]:
    """(importing unit, imported unit) → where, for imports between different units."""
    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    for top in {layer.split(".", 1)[0] for layer in LAYERS}:
        for path in sorted((ROOT / top).rglob("*.py")):
            if "migrations" in path.parts:
                continue  # history: it refers to apps by label, and never to code above it
            module = module_name(path)
            source = unit_of(module)
            tree = parse(path)
            for target, line in runtime_imports(tree, module, path.name == "__init__.py"):
                imported = unit_of(target)
                if source and imported and imported != source:
                    edges[(source, imported)].append(f"{path.relative_to(ROOT)}:{line}")
    return edges


def test_the_graph_sees_the_imports_that_exist():
    # The checker itself can fail: the edges the map is built on are found.
    edges = import_edges()
    assert ("channels_app", "qorven.agent") in edges
    assert ("sessions_app", "tenancy") in edges
    assert ("qorven", "channels_app") in edges  # the wiring's urls and asgi routing


def test_every_import_points_down_the_layers():
    rank = {unit: i for i, unit in enumerate(LAYERS)}
    upward = {f"{a} → {b}": where for (a, b), where in import_edges().items() if rank[b] > rank[a]}
    assert upward == {}, "imports against the map (README, Architecture):\n" + "\n".join(
        f"  {edge}: {', '.join(where[:5])}" for edge, where in sorted(upward.items()))


def test_no_two_packages_import_each_other():
    edges = import_edges()
    both_ways = sorted({tuple(sorted(pair)) for pair in edges if (pair[1], pair[0]) in edges})
    assert both_ways == [], "two-way imports:\n" + "\n".join(
        f"  {a} ↔ {b}: {edges[(a, b)][:3]} / {edges[(b, a)][:3]}" for a, b in both_ways)


def test_the_benchmarks_use_only_public_entry_points():
    """A benchmark times what the code does through the names it offers: one importing a
    private function (`_prompt`) breaks, or times the wrong thing, when that is renamed or
    folded into its caller."""
    own = {unit.split(".", 1)[0] for unit in LAYERS}
    private = []
    for path in sorted((ROOT / "bench").rglob("*.py")):
        for node in ast.walk(parse(path)):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".", 1)[0] in own:
                private += [f"{path.relative_to(ROOT)}:{node.lineno} {node.module}.{alias.name}"
                            for alias in node.names if alias.name.startswith("_")]
    assert private == [], "private names imported by benchmarks:\n" + "\n".join(private)


# What a migration may import of the project: other migrations (frozen as they are), and
# what Django's autodetector writes into field definitions and operations (validators,
# an operation class), which must go on existing under their names.
MIGRATION_IMPORTS = ("qorven.runtime.index_ops", "tenancy.models")


def test_a_migration_runs_the_code_it_was_written_with():
    """A migration that computes data (a search text, a digest) with today's functions
    writes today's result, not its version's, and breaks on import when one is renamed:
    an install upgraded across several migrations then differs from one that took them
    one at a time. Such code is copied into the migration, or another migration's copy used."""
    own = {unit.split(".", 1)[0] for unit in LAYERS} | {"legacy_app"}
    live = []
    for path in sorted(ROOT.glob("*/migrations/*.py")):
        module = module_name(path)
        tree = parse(path)
        targets = runtime_imports(tree, module, False)
        targets += [(node.args[0].value, node.lineno) for node in ast.walk(tree)
                    if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("import_module")
                    and node.args and isinstance(node.args[0], ast.Constant)]
        live += [f"{path.relative_to(ROOT)}:{line} {target}" for target, line in targets
                 if target.split(".", 1)[0] in own and ".migrations" not in target
                 and target not in MIGRATION_IMPORTS]
    assert live == [], "migrations importing live code:\n" + "\n".join(live)
