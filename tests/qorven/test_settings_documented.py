"""The README's configuration table and the settings agree: every variable the settings
read is documented there, and every variable documented there is read by the code."""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CODE = ["qorven", "channels_app", "sessions_app", "memory_app", "heartbeats_app", "tenancy", "legacy_app"]


def _table() -> set[str]:
    """The names in the first cell of the table's rows (a row may name two: `A` / `B`)."""
    cells = re.findall(r"^\| (`[A-Z][A-Z_0-9]+`[^|]*) \|", (ROOT / "README.md").read_text(encoding="utf-8"), re.M)
    return {name for cell in cells for name in re.findall(r"`([A-Z][A-Z_0-9]+)`", cell)}


def test_every_variable_the_settings_read_is_in_the_readmes_table():
    read = set(re.findall(r'env\.\w+\(\s*"([A-Z][A-Z_0-9]+)"', (ROOT / "qorven" / "settings.py").read_text()))
    for path in (ROOT / "qorven" / "runtime" / "environment").glob("*.py"):  # Env's own reads
        read |= set(re.findall(r'(?:self|env)\.\w+\(\s*"([A-Z][A-Z_0-9]+)"', path.read_text()))
    assert len(read) > 50  # the patterns still find them
    assert sorted(read - _table()) == []


def test_every_variable_in_the_readmes_table_is_read_by_the_code():
    names = set()
    for package in CODE:
        for path in (ROOT / package).rglob("*.py"):
            names |= set(re.findall(r'"([A-Z][A-Z_0-9]+)"', path.read_text(encoding="utf-8")))
    assert sorted(_table() - names) == []


def _literal(node: ast.expr) -> object:
    """A default written as a literal or as arithmetic on literals (`7 * 86400`); ... for
    one computed from another setting (the README says which, in words)."""
    try:
        return ast.literal_eval(node)
    except ValueError:
        pass
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mult, ast.Add)):
        left, right = _literal(node.left), _literal(node.right)
        if isinstance(left, int) and isinstance(right, int):
            return left * right if isinstance(node.op, ast.Mult) else left + right
    return ...


# Read with an empty default the settings then replace with one made at run time: the
# README says in words where the generated key is kept.
MADE_WHEN_EMPTY = {"DJANGO_SECRET_KEY"}


def _defaults_read() -> dict[str, object]:
    """Each variable read with a default given as a value, and that value: the first read's,
    and for `env.str("X", default="").strip() or "folder"` the value after `or`."""
    found: dict[str, object] = {}
    for source in (ROOT / "qorven" / "settings.py", *sorted((ROOT / "qorven" / "runtime" / "environment").glob("*.py"))):
        tree = ast.parse(source.read_text(encoding="utf-8"))
        instead = {id(call): either.values[1].value for either in ast.walk(tree)
                   if isinstance(either, ast.BoolOp) and isinstance(either.op, ast.Or)
                   and isinstance(either.values[1], ast.Constant)
                   for call in ast.walk(either.values[0]) if isinstance(call, ast.Call)}
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and isinstance(node.func.value, ast.Name) and node.func.value.id in ("env", "self") and node.args
                    and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
                    and re.fullmatch(r"[A-Z][A-Z_0-9]+", node.args[0].value)):
                continue
            given = [k.value for k in node.keywords if k.arg == "default"] or node.args[1:2]
            name = node.args[0].value
            if given and name not in MADE_WHEN_EMPTY and (value := _literal(given[0])) is not ...:
                found.setdefault(name, instead.get(id(node), value))
    return found


def _written(value: object) -> set[str]:
    """How the README's default column may write `value`."""
    if value in ("", []):
        return {"empty"}
    if isinstance(value, bool):
        return {f"`{str(value).lower()}`"}
    if isinstance(value, float):
        return {f"`{value:g}`", f"`{value}`"}
    if isinstance(value, list):
        return {f"`{','.join(value)}`"}
    return {f"`{value}`"}


def _default_cells() -> dict[str, str]:
    cells = {}
    for first, default in re.findall(r"^\| (`[A-Z][A-Z_0-9]+`[^|]*) \| ([^|]*) \|",
                                     (ROOT / "README.md").read_text(encoding="utf-8"), re.M):
        names = re.findall(r"`([A-Z][A-Z_0-9]+)`", first)
        # `A` / `B` | `2` / `20`: each name its own default, in the same order.
        parts = default.split(" / ") if len(names) > 1 and " / " in default else [default] * len(names)
        cells.update(zip(names, parts, strict=True))
    return cells


def test_every_default_in_the_readmes_table_is_the_one_the_settings_take():
    """A default written in the settings as a value is the one the table gives: a changed
    default left the table saying the old one."""
    defaults, cells = _defaults_read(), _default_cells()
    assert len(defaults) > 50  # the patterns still find them
    wrong = {name: (value, cells[name].strip()) for name, value in defaults.items()
             if not any(written in cells[name].lower() if written == "empty" else written in cells[name]
                        for written in _written(value))}
    assert wrong == {}
