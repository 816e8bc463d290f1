"""A column stage commits its staged results fragment by fragment: one fragment's values are in
memory at a time (a source's captions can be tens of GB), every row still gets its value, its
input fingerprint and the run's id, and a re-run redoes only the rows whose inputs changed; on a
local root and on moto S3."""

from __future__ import annotations

import os

import lance
import pyarrow as pa
import pyarrow.compute as pc

from prx_data.core.lance_io import update_columns
from prx_data.stages import column_stage as cs

STAGE = cs.ColumnStage(
    name="echo",
    columns=pa.schema([pa.field("echo", pa.string()), pa.field("echo_version", pa.string())]),
    current={"echo_version": "v1"},
    inputs=("text",),
)


def upper(ds: lance.LanceDataset, todo: pa.Table):
    for chunk in cs.address_chunks(todo, 7):
        rows = cs.read_rows(ds, chunk.column("_rowaddr").to_pylist(), ["text"])
        yield pa.table(
            {"sample_id": chunk.column("sample_id"), "echo": pc.utf8_upper(rows.column("text")), "echo_version": ["v1"] * chunk.num_rows}
        )


def test_results_are_committed_one_fragment_at_a_time(storage_root, monkeypatch):
    uri, options = storage_root.uri("t.lance"), storage_root.options

    def table() -> lance.LanceDataset:
        return lance.dataset(uri, storage_options=options)

    n = 250
    rows = pa.table({"sample_id": [f"id{i:04d}" for i in range(n)], "text": [f"text {i} " * 20 for i in range(n)], "status": ["ok"] * n})
    lance.write_dataset(rows, uri, max_rows_per_file=100, storage_options=options)
    assert len(table().get_fragments()) == 3

    held: list[int] = []
    read = cs.PartitionFiles.read

    def recording(self, part):
        got = read(self, part)
        if os.path.basename(self.folder) == "commit":  # the results spilled by fragment, not the plan's
            held.append(got.num_rows)
        return got

    monkeypatch.setattr(cs.PartitionFiles, "read", recording)
    stats = cs.run_column_stage(uri, STAGE, upper, storage_options=options, run_id="run-1")
    assert stats.processed == n
    assert sorted(held) == [50, 100, 100]  # the fragments' rows, one fragment per read

    done = table().to_table(columns=["sample_id", "text", "echo", "echo_run_id", "echo_input_fp"]).to_pylist()
    assert all(r["echo"] == r["text"].upper() and r["echo_run_id"] == "run-1" and r["echo_input_fp"] for r in done)
    fingerprints = {r["sample_id"]: r["echo_input_fp"] for r in done}

    # Three rows edited in the middle fragment: only they are redone, only their fragment is read.
    held.clear()
    edited = pa.table({"sample_id": ["id0120", "id0150", "id0199"], "text": ["new a", "new b", "new c"]})
    update_columns(table(), edited)
    stats = cs.run_column_stage(uri, STAGE, upper, storage_options=options, run_id="run-2")
    assert (stats.processed, held) == (3, [3])
    after = {r["sample_id"]: r for r in table().to_table(columns=["sample_id", "echo", "echo_run_id", "echo_input_fp"]).to_pylist()}
    assert [after[s]["echo"] for s in ("id0120", "id0150", "id0199")] == ["NEW A", "NEW B", "NEW C"]
    assert {s for s, r in after.items() if r["echo_run_id"] == "run-2"} == {"id0120", "id0150", "id0199"}
    assert {s for s, r in after.items() if r["echo_input_fp"] != fingerprints[s]} == {"id0120", "id0150", "id0199"}

    # Nothing changed: nothing is done, nothing is read.
    held.clear()
    assert cs.run_column_stage(uri, STAGE, upper, storage_options=options, run_id="run-3").processed == 0 and held == []


def test_a_redone_value_nulls_what_was_made_from_it_unless_it_came_out_the_same(storage_root):
    """``invalidates``: a redo that changes a row's value nulls its downstream column; one that
    makes the same value again keeps it (rows spread over fragments, results in any order)."""
    uri, options = storage_root.uri("inv.lance"), storage_root.options
    stage = cs.ColumnStage(name="echo", columns=STAGE.columns, current=STAGE.current, inputs=STAGE.inputs, invalidates=("mark",))
    n = 30
    rows = pa.table({"sample_id": [f"id{i:04d}" for i in range(n)], "text": [f"text {i}" for i in range(n)], "status": ["ok"] * n})
    lance.write_dataset(rows, uri, max_rows_per_file=10, storage_options=options)
    assert cs.run_column_stage(uri, stage, upper, storage_options=options).processed == n
    ds = lance.dataset(uri, storage_options=options)
    ds.add_columns({"mark": "'made from ' || echo"})
    # Two texts change their echo; two change only their case, so their echo comes out the same.
    edited = {"id0003": "other", "id0014": "TEXT 14", "id0025": "again", "id0026": "Text 26"}
    update_columns(lance.dataset(uri, storage_options=options), pa.table({"sample_id": list(edited), "text": list(edited.values())}))

    def reversed_upper(ds, todo):  # results in the reverse of table order
        yield from upper(ds, todo.take(pa.array(range(todo.num_rows - 1, -1, -1))))

    assert cs.run_column_stage(uri, stage, reversed_upper, storage_options=options).processed == len(edited)
    after = {
        r["sample_id"]: r for r in lance.dataset(uri, storage_options=options).to_table(columns=["sample_id", "echo", "mark"]).to_pylist()
    }
    assert {s: r["echo"] for s, r in after.items() if s in edited} == {s: t.upper() for s, t in edited.items()}
    assert {s for s, r in after.items() if r["mark"] is None} == {"id0003", "id0025"}
    assert all(r["mark"] == "made from " + r["echo"] for s, r in after.items() if s not in ("id0003", "id0025"))
