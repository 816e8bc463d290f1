"""A column stage's rows to do are planned, processed and committed one sample-id range at a time
past ``range_rows`` (issue 21 item 3): the run holds a range, not the source, and gives what one
range gives: the same values, fingerprints and run ids; a killed run resumes across ranges, even
when the number of ranges changed; rows made before fingerprints are adopted slice by slice.
On a local root and on moto S3."""

from __future__ import annotations

import os

import lance
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from prx_data.core.ids import sample_id
from prx_data.core.lance_io import ensure_columns
from prx_data.stages import column_stage as cs
from prx_data.stages import pending_plan

STAGE = cs.ColumnStage(
    name="echo",
    columns=pa.schema([pa.field("echo", pa.string()), pa.field("echo_version", pa.string())]),
    current={"echo_version": "v1"},
    inputs=("text",),
)
N = 240


class Upper:
    """Upper-cases ``text``; records the rows of each call; fails after ``fail_after`` chunks."""

    def __init__(self, fail_after: int | None = None):
        self.calls: list[int] = []
        self.fail_after, self.chunks = fail_after, 0

    def __call__(self, ds: lance.LanceDataset, todo: pa.Table):
        self.calls.append(todo.num_rows)
        for chunk in cs.address_chunks(todo, 8):
            if self.fail_after is not None and self.chunks >= self.fail_after:
                raise RuntimeError("killed")
            self.chunks += 1
            rows = cs.read_rows(ds, chunk.column("_rowaddr").to_pylist(), ["text"])
            yield pa.table(
                {
                    "sample_id": chunk.column("sample_id"),
                    "echo": pc.utf8_upper(rows.column("text")),
                    "echo_version": ["v1"] * chunk.num_rows,
                }
            )


def _table(storage_root, name: str) -> tuple[str, dict | None]:
    uri = storage_root.uri(f"{name}.lance")
    ids = [sample_id("src", str(i)) for i in range(N)]
    rows = pa.table({"sample_id": ids, "text": [f"text {i}" for i in range(N)], "status": ["ok"] * N})
    lance.write_dataset(rows, uri, max_rows_per_file=70, storage_options=storage_root.options)
    return uri, storage_root.options


def _stored(uri: str, options: dict | None) -> dict[str, tuple]:
    table = lance.dataset(uri, storage_options=options).to_table(columns=["sample_id", "echo", "echo_input_fp", "echo_run_id"])
    return {r["sample_id"]: (r["echo"], r["echo_input_fp"], r["echo_run_id"]) for r in table.to_pylist()}


def test_a_run_past_range_rows_works_one_range_at_a_time_and_gives_what_one_range_gives(storage_root, monkeypatch):
    one_uri, options = _table(storage_root, "one")
    many_uri, _ = _table(storage_root, "many")
    cs.run_column_stage(one_uri, STAGE, Upper(), storage_options=options, run_id="r")

    largest_plan_read = 0
    read = cs.PartitionFiles.read

    def recording(self, part):
        nonlocal largest_plan_read
        got = read(self, part)
        if os.path.basename(self.folder) in {"scan", "ranges"}:
            largest_plan_read = max(largest_plan_read, got.num_rows)
        return got

    monkeypatch.setattr(cs.PartitionFiles, "read", recording)
    upper = Upper()
    stats = cs.run_column_stage(many_uri, STAGE, upper, storage_options=options, run_id="r", range_rows=30)

    assert stats.extra["pending_ranges"] == 8 and stats.processed == stats.pending == N
    assert len(upper.calls) == 8 and sum(upper.calls) == N
    # Ranges are equal slices of the id space: none holds anywhere near the source.
    assert max(upper.calls) < N / 3 and largest_plan_read < N / 3
    assert _stored(many_uri, options) == _stored(one_uri, options)
    assert sorted(int(echo.removeprefix("TEXT ")) for echo, _, _ in _stored(many_uri, options).values()) == list(range(N))


@pytest.mark.parametrize("killed_range_rows", [1_000_000, 30])
def test_a_killed_run_resumes_range_by_range(storage_root, killed_range_rows):
    """Killed with one range (or eight), resumed with eight: staged results are found wherever
    their ids fall, and only the rest is done."""
    uri, options = _table(storage_root, "t")
    killed = Upper(fail_after=10)
    with pytest.raises(RuntimeError, match="killed"):
        cs.run_column_stage(uri, STAGE, killed, storage_options=options, run_id="r1", range_rows=killed_range_rows)
    staged = lance.dataset(cs.staging_uri(uri, "echo"), storage_options=options).count_rows()
    assert 70 <= staged <= 80  # ten chunks of at most 8 rows (a range's last chunk is shorter)

    resumed = Upper()
    stats = cs.run_column_stage(uri, STAGE, resumed, storage_options=options, run_id="r2", range_rows=30)
    assert (stats.resumed, stats.processed, sum(resumed.calls)) == (staged, N - staged, N - staged)
    stored = _stored(uri, options)
    assert sorted(int(echo.split()[1]) for echo, fp, _ in stored.values() if fp) == list(range(N))
    assert {run for _, _, run in stored.values()} == {"r2"}


def test_rows_made_before_fingerprints_are_adopted_slice_by_slice(storage_root, monkeypatch):
    uri, options = _table(storage_root, "t")
    cs.run_column_stage(uri, STAGE, Upper(), storage_options=options, run_id="r")
    before = _stored(uri, options)
    ds = lance.dataset(uri, storage_options=options)
    ds.update({"echo_input_fp": "NULL"})  # as a table from before the fingerprint column
    commits = []
    update = cs.update_fragments

    def counting(ds, parts, key="sample_id"):
        commits.append(1)
        return update(ds, parts, key)

    monkeypatch.setattr(cs, "update_fragments", counting)
    upper = Upper()
    stats = cs.run_column_stage(uri, STAGE, upper, storage_options=options, range_rows=50)
    assert (stats.processed, stats.extra["fingerprints_adopted"], upper.calls) == (0, N, [])
    assert len(commits) == 5  # 240 rows, 50 a slice
    assert _stored(uri, options) == before


def test_range_lookup_answers_across_ranges_in_the_callers_order(tmp_path):
    uri = str(tmp_path / "t.lance")
    ids = [sample_id("src", str(i)) for i in range(N)]
    lance.write_dataset(pa.table({"sample_id": ids, "text": ["x"] * N, "status": ["ok"] * N}), uri)
    ds = ensure_columns(lance.dataset(uri), STAGE.stored_columns)
    plan = pending_plan.plan_pending(ds, STAGE, str(tmp_path / "plan"), range_rows=20)
    assert plan.ranges == 12
    lookup = plan.lookup(cached_ranges=2)
    asked = pa.array([*reversed(ids), "not-a-row"])
    addresses = lookup.get(asked, "_rowaddr").to_pylist()
    assert addresses == [*reversed(range(N)), None]
    made_from_x = cs.input_fingerprints(pa.table({"text": ["x"]}), STAGE.inputs)[0]
    made = lookup.current_made(pa.array([ids[0], ids[1], "nope"]), pa.array([made_from_x, "other", made_from_x]))
    assert made.to_pylist() == [True, False, False]
    assert lookup.loads <= 2 * plan.ranges
