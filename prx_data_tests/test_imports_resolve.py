"""Every ``prx_data`` / ``benchmarks`` name the package, its tests, the benchmarks and the
scripts import exists, function-level imports included: a moved module breaks a benchmark no
test runs, and mypy's ``ignore_missing_imports`` hides it."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FIRST_PARTY = ("prx_data", "benchmarks")


def _imports(path: Path):
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module.startswith(FIRST_PARTY):
            yield node.lineno, node.module, [a.name for a in node.names if a.name != "*"]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(FIRST_PARTY):
                    yield node.lineno, alias.name, []


def _missing(module: str, names: list[str]) -> list[str]:
    try:
        found = importlib.import_module(module)
    except ImportError as error:
        return [f"{module} ({error})"]
    out = []
    for name in names:
        if not hasattr(found, name):
            try:
                importlib.import_module(f"{module}.{name}")
            except ImportError:
                out.append(f"{module}.{name}")
    return out


def test_first_party_imports_resolve():
    broken = []
    for folder in ("prx_data", "prx_data_tests", "benchmarks", "scripts"):
        for path in sorted((REPO / folder).rglob("*.py")):
            for line, module, names in _imports(path):
                broken += [f"{path.relative_to(REPO)}:{line}: {what}" for what in _missing(module, names)]
    assert not broken, "imports of names that do not exist:\n" + "\n".join(broken)
