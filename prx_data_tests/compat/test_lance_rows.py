"""Rows by address through Lance's public scanner: order, repeats, deletions, and the plan."""

from __future__ import annotations

import lance
import pyarrow as pa
import pytest

from prx_data.compat import lance_rows


@pytest.fixture
def ds(tmp_path) -> lance.LanceDataset:
    n = 1000
    table = pa.table({"sample_id": [f"s{i:04d}" for i in range(n)], "n": list(range(n)), "caption": [f"c{i}" for i in range(n)]})
    lance.write_dataset(table, str(tmp_path / "t"), max_rows_per_file=300)
    out = lance.dataset(str(tmp_path / "t"))
    out.delete("n % 7 = 0")
    return lance.dataset(str(tmp_path / "t"))


def _addresses(ds: lance.LanceDataset) -> dict[int, int]:
    t = ds.to_table(columns=["n"], with_row_address=True)
    return dict(zip(t.column("n").to_pylist(), t.column("_rowaddr").to_pylist()))


def test_installed_pylance_is_the_version_the_adapter_was_written_for() -> None:
    assert lance_rows.version_mismatch() is None, lance_rows.version_mismatch()


def test_rows_come_back_in_request_order_across_fragments_with_repeats(ds) -> None:
    addr = _addresses(ds)
    wanted = [997, 3, 302, 3, 650, 1]  # three fragments, out of order, one repeat
    got = lance_rows.take_by_address(ds, [addr[n] for n in wanted], ["n", "sample_id"])
    assert got.column_names == ["n", "sample_id"]
    assert got.column("n").to_pylist() == wanted
    assert got.column("sample_id").to_pylist() == [f"s{n:04d}" for n in wanted]


def test_a_deleted_or_unknown_address_is_an_error_not_a_short_table(ds) -> None:
    addr = _addresses(ds)
    deleted = 7  # n % 7 == 0 was deleted: its address is the next row's minus one
    with pytest.raises(LookupError, match="1 row address"):
        lance_rows.take_by_address(ds, [addr[1], addr[deleted + 1] - 1], ["n"])
    with pytest.raises(LookupError):
        lance_rows.take_by_address(ds, [(99 << 32) + 5], ["n"])


def test_no_addresses_give_an_empty_table_with_the_columns(ds) -> None:
    got = lance_rows.take_by_address(ds, [], ["sample_id", "n"])
    assert got.num_rows == 0 and got.schema.names == ["sample_id", "n"]


def test_the_address_filter_is_planned_as_a_take_not_a_scan(ds) -> None:
    """If Lance stops turning ``_rowaddr IN`` into a take, each chunk becomes a full scan."""
    addr = _addresses(ds)
    plan = ds.scanner(columns=["n"], filter=lance_rows.address_filter([addr[1], addr[500]]), with_row_address=True).explain_plan()
    assert "full_filter=--" in plan and "_rowaddr" not in plan.split("full_filter=")[1].split(",")[0], plan


def test_delete_in_fragment_gives_metadata_for_one_update_commit(ds) -> None:
    before = ds.version
    frag = ds.get_fragments()[1]
    ids = frag.to_table(columns=["sample_id"]).column("sample_id").to_pylist()
    kept = frag.count_rows()
    meta = lance_rows.delete_in_fragment(ds, frag.fragment_id, "sample_id", [ids[0], "s'quote", ids[1]])
    assert meta is not None and ds.version == before  # nothing committed yet
    op = lance.LanceOperation.Update(updated_fragments=[meta])
    after = lance.LanceDataset.commit(ds.uri, op, read_version=ds.version)
    assert after.count_rows() == ds.count_rows() - 2
    assert frag.fragment_id in {f.fragment_id for f in after.get_fragments()}
    fragment = after.get_fragment(frag.fragment_id)
    assert fragment is not None and fragment.count_rows() == kept - 2
    assert lance_rows.delete_in_fragment(after, frag.fragment_id, "sample_id", ids) is None  # emptied
