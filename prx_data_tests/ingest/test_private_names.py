"""Ingest's rooms talk through public names: no module of prx_data imports an ingest module's
private name (``from prx_data.ingest.read.jsonl import _x``) or reaches one through the module
(``jsonl._x``). The import-linter contracts of pyproject.toml check which module may import
which; this checks what crosses between them."""

from __future__ import annotations

import ast
from pathlib import Path

import prx_data

PACKAGE = Path(prx_data.__file__).parent
INGEST = "prx_data.ingest"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def private_uses(tree: ast.Module, own: str) -> list[tuple[int, str]]:
    """(line, 'module._name') for each private name of another ingest module that ``tree`` uses."""
    found: list[tuple[int, str]] = []
    modules: dict[str, str] = {}  # local name -> the ingest module it is bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module.startswith(INGEST):
            for alias in node.names:
                if alias.name.startswith("_") and node.module != own:
                    found.append((node.lineno, f"{node.module}.{alias.name}"))
                modules[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(INGEST) and alias.asname:
                    modules[alias.asname] = alias.name
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            base = node.value
            if isinstance(base, ast.Name) and base.id in modules and modules[base.id] != own:
                found.append((node.lineno, f"{modules[base.id]}.{node.attr}"))
    return found


def test_the_check_sees_private_names_imported_or_reached_through_a_module():
    sample = ast.parse(
        "from prx_data.ingest.read.jsonl import _scan, line_runs\n"
        "from prx_data.ingest.read import parquet\n"
        "import prx_data.ingest.http.download_session as session\n"
        "parquet._position_key(1)\nsession._close_shared()\nparquet.read_parquet()\n"
    )
    assert sorted(m for _, m in private_uses(sample, "prx_data.ingest.driver")) == [
        "prx_data.ingest.http.download_session._close_shared",
        "prx_data.ingest.read.jsonl._scan",
        "prx_data.ingest.read.parquet._position_key",
    ]
    assert private_uses(sample, "prx_data.ingest.read.jsonl") == [
        (4, "prx_data.ingest.read.parquet._position_key"),
        (5, "prx_data.ingest.http.download_session._close_shared"),
    ]


def test_no_module_uses_a_private_name_of_an_ingest_module():
    paths = sorted(PACKAGE.rglob("*.py"))
    assert any(p.name == "units.py" and p.parent.name == "read" for p in paths)
    offenders = {
        str(path.relative_to(PACKAGE)): found
        for path in paths
        if (found := private_uses(ast.parse(path.read_text(), filename=str(path)), _module_name(path)))
    }
    assert not offenders, f"private names of ingest modules used from outside them (make them public, or keep the use inside): {offenders}"
