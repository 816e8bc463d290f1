"""An import-linter contract type: private modules of other distributions are imported only by
the adapter packages (``prx_data.compat``, ``prx_data.defs.compat``).

import-linter's own ``forbidden`` contract cannot name a subpackage of an external package
(grimp keeps an external distribution as one squashed module), so this contract reads the import
statements grimp recorded for each import of an external package and checks the module paths
they name. A module path is private when one of its parts starts with an underscore (not a
dunder: ``__future__`` is public), or when it starts with one of ``internal_modules`` (packages
whose internals have no underscore, such as ``streaming.base``). ``from X import _y`` counts as
importing ``X._y``. Only the first line of a statement is recorded, so names listed on the
continuation lines of a parenthesised ``from X import (...)`` are not checked; the module path
always is.

Registered in ``[tool.importlinter] contract_types``; ``lint-imports`` puts the repository root
on ``sys.path``, which is how it finds this module.
"""

from __future__ import annotations

import re

import grimp
from importlinter.application import output
from importlinter.domain import fields
from importlinter.domain.contract import Contract, ContractCheck

_FROM = re.compile(r"^\s*from\s+([\w.]+)\s+import\s+\(?\s*(.*)$")
_IMPORT = re.compile(r"^\s*import\s+(.+)$")


def _private_part(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def imported_paths(statement: str) -> list[str]:
    """The module paths an import statement (its first line) names."""
    statement = statement.split("#", 1)[0].strip()
    if match := _FROM.match(statement):
        module, names = match.group(1), match.group(2)
        found = [module]
        for name in names.rstrip(")\\").split(","):
            name = name.strip().split(" as ")[0].strip()
            if name and name != "*":
                found.append(f"{module}.{name}")
        return found
    if match := _IMPORT.match(statement):
        return [part.strip().split(" as ")[0].strip() for part in match.group(1).split(",") if part.strip()]
    return []


def is_private(path: str, internal_modules: set[str]) -> bool:
    parts = path.split(".")
    return any(_private_part(part) for part in parts) or any(path == m or path.startswith(f"{m}.") for m in internal_modules)


class PrivateApisContract(Contract):
    """Options:

    - ``adapters``: the packages (with their descendants) that may import private modules.
    - ``internal_modules``: modules of external packages that count as private though no part
      of their name starts with an underscore.
    """

    type_name = "private_apis"

    adapters = fields.ListField(subfield=fields.StringField())
    internal_modules = fields.ListField(subfield=fields.StringField(), required=False)

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        adapters = [str(a) for a in self.adapters]  # type: ignore[attr-defined]
        internal = {str(m) for m in (self.internal_modules or [])}  # type: ignore[attr-defined, union-attr]
        roots = {name.split(".")[0] for name in graph.modules if not graph.is_module_squashed(name)}
        violations = []
        for external in sorted(m for m in graph.modules if graph.is_module_squashed(m) and m.split(".")[0] not in roots):
            for importer in sorted(graph.find_modules_that_directly_import(external)):
                if any(importer == a or importer.startswith(f"{a}.") for a in adapters):
                    continue
                for detail in graph.get_import_details(importer=importer, imported=external):
                    private = [p for p in imported_paths(detail["line_contents"]) if is_private(p, internal)]
                    if private:
                        violations.append((importer, detail["line_number"], ", ".join(private)))
        return ContractCheck(kept=not violations, metadata={"violations": violations})

    def render_broken_contract(self, check: ContractCheck) -> None:
        output.print_error("Private modules of other packages imported outside the adapters:", bold=False)
        output.new_line()
        for importer, line, private in check.metadata["violations"]:
            output.print_error(f"- {importer} (l.{line}) imports {private}", bold=False)
            output.new_line()
        output.print("Move the use into an adapter (prx_data/compat/, or prx_data/defs/compat/ for Dagster) with a version test.")
