"""Every name in the storage layout is spelled in one module: what lives under the MDS root in
``prx_data/export/tree.py``, what lives under the Lance root in ``prx_data/core/paths.py``
(docs/architecture.md, "Storage layout"). Anywhere else a name is used, it is imported.

A literal counts when it holds one of the names and no whitespace: names and path pieces have
none, while prose (docstrings, Dagster descriptions, error messages) does and may mention them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import prx_data

PACKAGE = Path(prx_data.__file__).parent

MDS_NAMES = (
    "index.json",
    "skiplists.json",
    ".skip.",
    "unpublished.json",
    "retired_buckets.json",
    "receipt.json",
    "--fold",
    "_commits",
    ".running",
    "_retired",
    "_reports",
    "data_card.md",
    "card_figures.json",
    "superseded.json",
    "_superseded",
)
LANCE_NAMES = (".lance", "staging-", "optout_audit", "optout_samples", "optout_builds", "optout_withdrawals")
OWNER = {**dict.fromkeys(MDS_NAMES, "export/tree.py"), **dict.fromkeys(LANCE_NAMES, "core/paths.py")}
# Literals that hold a name but are not a path of the layout, and why.
NOT_LAYOUT = {
    ("demo/corpus.py", ".lance"): "the demo's 'archive' source reads an input Lance file of its own, outside the Lance root",
}


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                found.add(id(first.value))
    return found


def name_literals(source: str) -> list[tuple[int, str, str]]:
    """(line, name, literal) of each whitespace-free string literal (f-string parts included)
    holding a layout name."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and id(node) not in skip
            and not any(c.isspace() for c in node.value)
        ):
            found += [(node.lineno, name, node.value) for name in OWNER if name in node.value]
    return found


def test_the_check_sees_names_in_literals_and_f_strings_not_in_prose():
    sample = 'X = "_commits"\ndef f(s):\n    """Reads index.json."""\n    return f"{s}.running", "see its index.json file", f"{s}.lance"\n'
    assert [(line, name) for line, name, _ in name_literals(sample)] == [(1, "_commits"), (4, ".running"), (4, ".lance")]


def test_every_layout_name_is_spelled_in_its_one_module():
    misplaced = []
    seen = set()
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        for line, name, literal in name_literals(path.read_text()):
            if rel == OWNER[name]:
                seen.add(name)
            elif (rel, name) not in NOT_LAYOUT:
                misplaced.append(f"prx_data/{rel}:{line}: {literal!r} (import it from prx_data/{OWNER[name]})")
    assert not misplaced, "storage-layout names spelled outside their module:\n" + "\n".join(misplaced)
    assert seen == set(OWNER), f"names no module spells any more (drop them here): {sorted(set(OWNER) - seen)}"


def test_the_exceptions_are_still_there():
    for rel, name in NOT_LAYOUT:
        assert any(n == name for _, n, _ in name_literals((PACKAGE / rel).read_text())), (
            f"{rel} no longer holds {name!r}: drop it from NOT_LAYOUT"
        )
