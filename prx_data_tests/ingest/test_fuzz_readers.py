"""Fuzzing every reader (issue 17.6): random bytes, tars, Parquet schemas, JSONL and Lance tables.

Invariants, through the real ingest (reader, probe, Lance write):
- no exception escapes, whatever the input;
- every item found becomes exactly one row: rows written + duplicate keys skipped == items.

CI runs a bounded number of examples per reader. For a longer local run:

    PRX_FUZZ_EXAMPLES=2000 .venv/bin/python -m pytest -q prx_data_tests/ingest/test_fuzz_readers.py
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tarfile
import tempfile
from contextlib import contextmanager
from pathlib import Path

import lance
import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from prx_data.ingest.driver import ingest_source
from prx_data.ingest.registry import RegisteredSource, SourceSpec
from prx_data_tests import images

EXAMPLES = int(os.environ.get("PRX_FUZZ_EXAMPLES", "12"))
FUZZ = settings(
    max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), derandomize="PRX_FUZZ_EXAMPLES" not in os.environ
)

# A few real images so that random inputs also exercise the happy path.
_REAL = [images.jpeg(48, 32, seed=1), images.png(images.photo_like(20, 20, 2)), b""]
_bytes = st.one_of(st.binary(max_size=300), st.sampled_from(_REAL), st.sampled_from(_REAL).map(lambda b: b[: len(b) // 2]))
_name = st.text(alphabet="abcXYZ019_-", min_size=1, max_size=6)


@contextmanager
def _workdir():
    path = Path(tempfile.mkdtemp(prefix="prx-fuzz-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _ingest(work: Path, **spec):
    src = RegisteredSource(SourceSpec(name="fuzz", **spec), work / "spec.yaml")
    uri = str(work / "t.lance")
    stats = ingest_source(src, uri)
    return stats, lance.dataset(uri).count_rows()


@FUZZ
@given(
    files=st.dictionaries(_name, _bytes, max_size=6),
    sidecars=st.dictionaries(_name, st.binary(max_size=60), max_size=4),
    ext=st.sampled_from(["jpg", "png", "webp", "bin", ""]),
)
def test_image_folder_of_random_bytes(files, sidecars, ext):
    with _workdir() as work:
        folder = work / "f"
        folder.mkdir()
        for name, data in files.items():
            (folder / (f"{name}.{ext}" if ext else name)).write_bytes(data)
        for name, data in sidecars.items():
            (folder / f"{name}.{'txt' if len(data) % 2 else 'json'}").write_bytes(data)
        stats, rows = _ingest(work, shape="image_folder", location=str(folder))
        assert rows == len(files) == stats.seen


_member = st.tuples(_name, st.sampled_from(["jpg", "png", "txt", "json", "cls", "jpg.gz", ""]), _bytes)


@FUZZ
@given(members=st.lists(_member, max_size=10), raw=st.one_of(st.none(), st.binary(max_size=2000)))
def test_webdataset_of_random_tars(members, raw):
    with _workdir() as work:
        if raw is not None:
            (work / "raw.tar").write_bytes(raw)  # not a tar at all, or a broken one
        with tarfile.open(work / "good.tar", "w") as tar:
            for key, ext, data in members:
                info = tarfile.TarInfo(f"{key}.{ext}" if ext else key)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        stats, rows = _ingest(work, shape="webdataset", location=str(work / "*.tar"))
        keys = {m[0] for m in members}
        # Every key is a row; a file that is not a readable tar is at most one row more.
        assert rows == stats.seen - stats.duplicate_key_count
        assert len(keys) <= rows <= len(keys) + (raw is not None)


_cell_types = {
    "string": (pa.string(), st.one_of(st.none(), st.text(max_size=8))),
    "int": (pa.int64(), st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1))),
    "binary": (pa.binary(), st.one_of(st.none(), _bytes)),
    "float": (pa.float64(), st.one_of(st.none(), st.floats(allow_nan=True))),
    "bool": (pa.bool_(), st.one_of(st.none(), st.booleans())),
    "list": (pa.list_(pa.float64()), st.one_of(st.none(), st.lists(st.one_of(st.none(), st.floats(-10, 10)), max_size=3))),
    "struct": (
        pa.struct([("en", pa.string())]),
        st.one_of(st.none(), st.fixed_dictionaries({"en": st.one_of(st.none(), st.text(max_size=5))})),
    ),
}


@st.composite
def _tables(draw):
    n = draw(st.integers(0, 6))
    columns = {}
    for name in ("k", "img", "cap", "emb"):
        kind = draw(st.sampled_from(sorted(_cell_types)))
        typ, values = _cell_types[kind]
        columns[name] = pa.array(draw(st.lists(values, min_size=n, max_size=n)), typ)
    return pa.table(columns)


_FIELDS = {"key": "k", "image": "img", "caption": "cap", "embedding": "emb", "caption_language": "en"}


@FUZZ
@given(table=_tables(), garbage=st.one_of(st.none(), st.binary(max_size=200)))
def test_parquet_with_random_schemas(table, garbage):
    with _workdir() as work:
        pq.write_table(table, work / "a.parquet")
        if garbage is not None:
            (work / "b.parquet").write_bytes(garbage)
        stats, rows = _ingest(work, shape="parquet", location=str(work / "*.parquet"), fields=_FIELDS, embedding_dim=2)
        assert rows == stats.seen - stats.duplicate_key_count
        assert stats.seen == table.num_rows + (garbage is not None)


@FUZZ
@given(table=_tables())
def test_lance_with_random_schemas(table):
    with _workdir() as work:
        lance.write_dataset(table, str(work / "src.lance"))
        stats, rows = _ingest(work, shape="lance", location=str(work / "src.lance"), fields=_FIELDS, embedding_dim=2)
        assert rows == stats.seen - stats.duplicate_key_count == table.num_rows - stats.duplicate_key_count


_json = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=6)),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(["k", "img", "cap", "emb", "en", "x"]), inner, max_size=4)
    ),
    max_leaves=8,
)
_line = st.one_of(_json.map(lambda v: json.dumps(v).encode()), st.binary(max_size=40).filter(lambda b: b"\n" not in b))


def _expected_lines(body: bytes) -> int:
    count = 0
    for i, raw in enumerate(body.split(b"\n")):
        try:
            text = raw.decode("utf-8-sig" if i == 0 else "utf-8")
        except UnicodeDecodeError:
            count += 1
            continue
        count += bool(text.strip())
    return count


@FUZZ
@given(lines=st.lists(_line, max_size=8), kind=st.sampled_from(["bytes", "path", "url"]))
def test_jsonl_of_random_lines(lines, kind):
    with _workdir() as work:
        body = b"\n".join(lines)
        (work / "a.jsonl").write_bytes(body)
        fields = {**_FIELDS, "image_kind": kind}
        # URL items are refused before any connection (no allowed networks), so nothing leaves.
        stats, rows = _ingest(
            work, shape="jsonl", location=str(work / "a.jsonl"), fields=fields, embedding_dim=2, download={"timeout_s": 0.2, "retries": 0}
        )
        assert stats.seen == _expected_lines(body)
        assert rows == stats.seen - stats.duplicate_key_count
