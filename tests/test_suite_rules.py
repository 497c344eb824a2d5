"""Rules of the suite itself, checked on its files: what one test leaves behind is never
another test's to find."""
from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def test_only_the_schema_fixture_takes_the_test_databases_migrations_back():
    """A test that migrates back leaves a schema every later test on its database fails
    on, unless every migration is applied again however it ends: the `schema` fixture
    (tests/conftest.py) does that, so no test runs the migration executor itself."""
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        if path == TESTS / "conftest.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Name | ast.Attribute) and (
                    getattr(node, "id", None) or getattr(node, "attr", None)) == "MigrationExecutor":
                found.append(f"{path.relative_to(TESTS)}:{node.lineno}")
    assert found == [], "MigrationExecutor used outside the schema fixture:\n" + "\n".join(found)
