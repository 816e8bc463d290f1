"""The layering rules of docs/architecture.md, checked on the source: plain modules never import
Dagster (Ray workers import them) and never read the settings behind their callers' backs;
nothing reads settings or files when a module is imported; no file is looked up beside the
source tree."""

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
SETTINGS_HIDDEN_DEFAULTS: dict[str, str] = {}
# Calls that read the settings or the file system: none may run when a module is imported.
IMPORT_TIME_READS = {
    "get_settings",
    "load_settings",
    "open",
    "read_text",
    "read_bytes",
    "load_registry",
    "exists",
    "is_file",
    "isfile",
    "isdir",
}
IMPORT_TIME_READS |= {"listdir", "scandir", "glob", "rglob", "iterdir", "stat", "getenv"}
# Where ``__file__`` may be used, and why: nothing is read relative to the source tree, since an
# installed wheel has only the package (package data goes through importlib.resources).
FILE_USES = {
    "app/local_ray.py": "the folder prx_data was imported from, put first on the watchdog's PYTHONPATH",
    "app/ui.py": "the folder prx_data was imported from, put first on the UI code server's PYTHONPATH",
    "defs/build.py": "the defs package's own folder, which the defs-folder loader walks (shipped in the wheel)",
    "demo/images.py": "scikit-image's bundled sample photos (its package data, not this tree)",
}


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
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and _is_dagster(node.module):
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


def import_time_reads(tree: ast.Module) -> list[tuple[int, str]]:
    """Reads in code that runs at import: module and class bodies, decorators, default values
    (not function bodies)."""
    found = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for part in (*node.decorator_list, *node.args.defaults, *(d for d in node.args.kw_defaults if d is not None)):
                visit(part)
            return

        if isinstance(node, ast.Lambda):
            return
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
            if name in IMPORT_TIME_READS:
                found.append((node.lineno, name))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def file_uses(tree: ast.Module) -> list[int]:
    """Lines that take a module's ``__file__`` (this one's or another package's)."""
    return sorted(
        node.lineno
        for node in ast.walk(tree)
        if (isinstance(node, ast.Name) and node.id == "__file__") or (isinstance(node, ast.Attribute) and node.attr == "__file__")
    )


def test_the_checks_see_what_they_look_for():
    sample = ast.parse(
        "import dagster as dg\nfrom dagster_ray import LocalRay\nimport dagsterish\n"
        "def f():\n    from prx_data.core.settings import get_settings\n    return get_settings().x\n"
    )
    assert [m for _, m in dagster_imports(sample)] == ["dagster", "dagster_ray"]
    assert settings_calls(sample) == [6]
    at_import = ast.parse(
        "import os\nX = get_settings().a\n@dg.sensor(minimum_interval_seconds=get_settings().b)\ndef f(p=open('x')):\n"
        "    return get_settings(), open('y')\nclass C:\n    y = os.getenv('Z')\n    def m(self):\n        return load_registry(1)\n"
        "g = lambda: get_settings()\nHERE = __file__\nTHERE = os.__file__\n"
    )
    assert import_time_reads(at_import) == [(2, "get_settings"), (3, "get_settings"), (4, "open"), (7, "getenv")]
    assert file_uses(at_import) == [11, 12]
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


def test_nothing_reads_settings_or_files_at_import():
    """Work that depends on settings or files runs when the Definitions load or a function is
    called: assets and sensors whose attributes follow the settings are built by a
    ``@dg.definitions`` function, code versions are cached functions."""
    offenders = {rel: found for rel, tree in _modules().items() if (found := import_time_reads(tree))}
    assert not offenders, f"reads at import time (build the object when the Definitions load, or in a function): {offenders}"


def test_no_file_is_looked_up_relative_to_the_source_tree():
    offenders = {rel: lines for rel, tree in _modules().items() if rel not in FILE_USES and (lines := file_uses(tree))}
    assert not offenders, (
        f"__file__ used (ship the file as package data and read it with importlib.resources, or name it by a setting): {offenders}"
    )
    modules = _modules()
    stale = [rel for rel in FILE_USES if rel not in modules or not file_uses(modules[rel])]
    assert not stale, f"no longer use __file__: drop them from FILE_USES: {stale}"


def label_set_literals(tree: ast.Module, labels: frozenset[str]) -> list[int]:
    """Lines of tuple/list/set literals that spell exactly ``labels``."""
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, (ast.Tuple, ast.List, ast.Set))
        and node.elts
        and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts)
        and frozenset(e.value for e in node.elts if isinstance(e, ast.Constant)) == labels
    ]


def test_a_settings_default_is_written_once():
    """The labels excluded by default are spelled in core/settings.py only; every other default
    (the export resource, the CLI, the skip-list functions) names EXCLUDE_LABELS."""
    from prx_data.core.settings import EXCLUDE_LABELS

    labels = frozenset(EXCLUDE_LABELS)
    assert label_set_literals(ast.parse('a = ("nsfw", "text")\nb = ["text", "nsfw"]\nc = ("nsfw",)\n'), labels) == [1, 2]
    # The same two labels for another reason: the classifier's precedence (nsfw before text).
    other_meaning = {"models/labeling/minilm.py"}
    found = {rel: lines for rel, tree in _modules().items() if rel not in other_meaning and (lines := label_set_literals(tree, labels))}
    assert set(found) == {"core/settings.py"} and len(found["core/settings.py"]) == 1, found
