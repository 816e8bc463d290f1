"""The layering rules of docs/architecture.md, checked on the source: plain modules never import
Dagster (Ray workers import them) and never read the settings behind their callers' backs."""

from __future__ import annotations

import ast
from pathlib import Path

import prx_data

PACKAGE = Path(prx_data.__file__).parent

# Where Dagster may be imported: the wiring.
DAGSTER_ALLOWED = ("defs/",)

# Where get_settings() may be called, and why.
SETTINGS_READERS = {
    "core/settings.py": "defines it",
    "app/cli.py": "an entry point: reads the settings once and passes them on",
    "explorer/app.py": "the explorer's entry point (build_app / main), same as cli",
    "app/local_ray.py": "shared_local_ray, used by the cli and `prx-data ui` only: it sets "
    "PRX_RAY_ADDRESS for a block, so it reads and resets the settings it changes",
    "defs/": "the wiring: resources and assets read the settings of the code location",
}
# Hidden defaults still to turn into parameters; listed so that no new one appears unnoticed.
SETTINGS_HIDDEN_DEFAULTS = {}


def _modules() -> dict[str, ast.Module]:
    return {path.relative_to(PACKAGE).as_posix(): ast.parse(path.read_text(), filename=str(path)) for path in sorted(PACKAGE.rglob("*.py"))}


def _allowed(rel: str, prefixes) -> bool:
    return any(rel == p or (p.endswith("/") and rel.startswith(p)) for p in prefixes)


def _is_dagster(module: str | None) -> bool:
    top = (module or "").split(".")[0]
    return top == "dagster" or top.startswith("dagster_")


def dagster_imports(tree: ast.Module) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if _is_dagster(a.name)]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and _is_dagster(node.module):
            found.append((node.lineno, node.module))
    return found


def settings_calls(tree: ast.Module) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            if name == "get_settings":
                lines.append(node.lineno)
    return lines


def test_the_checks_see_what_they_look_for():
    sample = ast.parse(
        "import dagster as dg\nfrom dagster_ray import LocalRay\nimport dagsterish\n"
        "def f():\n    from prx_data.core.settings import get_settings\n    return get_settings().x\n"
    )
    assert [m for _, m in dagster_imports(sample)] == ["dagster", "dagster_ray"]
    assert settings_calls(sample) == [6]
    modules = _modules()
    assert "defs/build.py" in modules and "app/cli.py" in modules and len(modules) > 50


def test_dagster_is_imported_only_under_defs():
    offenders = {rel: found for rel, tree in _modules().items() if not _allowed(rel, DAGSTER_ALLOWED) and (found := dagster_imports(tree))}
    assert not offenders, f"plain modules import Dagster (move the code into prx_data/defs/): {offenders}"


def test_plain_modules_do_not_read_settings():
    allowed = (*SETTINGS_READERS, *SETTINGS_HIDDEN_DEFAULTS)
    offenders = {rel: lines for rel, tree in _modules().items() if not _allowed(rel, allowed) and (lines := settings_calls(tree))}
    assert not offenders, f"plain modules call get_settings() (take the value as a parameter): {offenders}"


def test_the_allow_lists_hold_no_stale_entry():
    """A file that no longer reads the settings leaves the allow-list, so it cannot start again."""
    modules = _modules()
    for rel in (*SETTINGS_READERS, *SETTINGS_HIDDEN_DEFAULTS):
        if rel.endswith("/"):
            assert any(m.startswith(rel) for m in modules), rel
        elif rel != "core/settings.py":
            assert rel in modules and settings_calls(modules[rel]), f"{rel} no longer calls get_settings(): drop it from the allow-list"
