"""What a resumable column stage owns and how a row is judged current: the stage's declaration,
and the fingerprint of the inputs a value was made from (``stages.column_stage`` runs it)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Literal

import pyarrow as pa
import pyarrow.compute as pc

from prx_data.core.filters import STATUS_OK, Expr, all_of, any_of, differs, equals, is_set
from prx_data.core.schema import input_fingerprint_field


@dataclass(frozen=True)
class ColumnStage:
    """What a stage writes and how to tell rows that are already current."""

    name: str  # e.g. "phash"; names the staging table
    columns: pa.Schema  # the columns it owns (without sample_id)
    # Column values that mark a row as done by the current code (e.g. {"phash_version": "v1"}).
    current: dict[str, str]
    # Rows eligible at all (e.g. status = 'ok'); others are never touched.
    eligible: Expr = field(default_factory=lambda: STATUS_OK)
    # Columns whose being set also marks a row as needing work (e.g. caption_error). Names, not
    # an expression: the rows to do are judged batch by batch in Arrow, so the columns a
    # condition reads must be known to the scan.
    redo_if_set: tuple[str, ...] = ()
    # Downstream columns made from this stage's output: nulled for every row this stage redoes
    # (a new caption invalidates its label).
    invalidates: tuple[str, ...] = ()
    # Columns each value is made from (e.g. ("image_sha256", "source_caption")); their fingerprint
    # is kept in ``fingerprint_column`` and a row whose inputs changed is redone.
    inputs: tuple[str, ...] = ()
    # What rows made before fingerprints existed get (see ``stages.column_stage``).
    upgrade: Literal["adopt", "redo"] = "adopt"
    # Fingerprints of other stages made from this stage's own output, computed from the result
    # (a fused caption request writes the label too: {"label_input_fp": ("caption",)}).
    output_fingerprints: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def fingerprint_column(self) -> str | None:
        return input_fingerprint_field(self.name).name if self.inputs else None

    @property
    def stored_columns(self) -> pa.Schema:
        """What the stage writes into the table: its columns and, with inputs, their fingerprint."""
        extra = [pa.field(name, pa.string()) for name in self.output_fingerprints]
        own = [input_fingerprint_field(self.name)] if self.inputs else []
        return pa.schema([*self.columns, *own, *extra])

    @property
    def condition_columns(self) -> list[str]:
        """The columns :meth:`stale` reads."""
        return list(dict.fromkeys([*self.current, *self.redo_if_set]))

    def pending_filter(self) -> Expr:
        stale = [differs(col, val) for col, val in self.current.items()]
        stale += [is_set(col) for col in self.redo_if_set]
        return all_of(self.eligible, any_of(*stale))

    def current_filter(self) -> Expr:
        """Rows whose stage columns were made by the current code."""
        return all_of(*(equals(c, v) for c, v in self.current.items()))

    def stale(self, batch: pa.RecordBatch | pa.Table) -> pa.Array:
        """Per row of ``batch`` (eligible rows holding :attr:`condition_columns`): made by other
        code, or marked for redoing; :meth:`pending_filter` evaluated in Arrow."""
        masks = [pc.or_kleene(pc.is_null(batch.column(c)), pc.not_equal(batch.column(c), pa.scalar(v))) for c, v in self.current.items()]
        masks += [pc.is_valid(batch.column(c)) for c in self.redo_if_set]
        out = pa.array([False] * batch.num_rows) if not masks else masks[0]
        for mask in masks[1:]:
            out = pc.or_kleene(out, mask)
        return pc.fill_null(out, False)


def input_fingerprints(table: pa.Table | pa.RecordBatch, inputs: tuple[str, ...]) -> list[str]:
    """One fingerprint per row of the ``inputs`` values (null and "" differ; order matters)."""
    # An input the table lacks counts as null (a table made before that column existed).
    names = table.schema.names
    columns = [table.column(name).to_pylist() if name in names else [None] * table.num_rows for name in inputs]
    # Each value tagged (\x00 null, \x01 + text) and separated by \x1e: unambiguous, and about
    # cheaper than json.dumps per row (this runs over every eligible row on every run).
    blake = hashlib.blake2b
    return [
        blake(
            "\x1e".join("\x00" if v is None else "\x01" + str(v) for v in values).encode("utf-8", "surrogateescape"), digest_size=16
        ).hexdigest()
        for values in zip(*columns)
    ]


# The fingerprint column of the rows to do (the stage's own name is not needed there).
FINGERPRINT = "fingerprint"

__all__ = ["FINGERPRINT", "ColumnStage", "input_fingerprints"]
