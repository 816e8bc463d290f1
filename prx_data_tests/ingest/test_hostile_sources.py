"""Issue 17: hostile sources. Each test is one case of the issue; every one failed before.

Ingest runs for real (readers, probe, Lance) on small inputs under tmp_path; nothing is mocked
except DNS answers where a test needs a name to resolve to a chosen address.
"""

from __future__ import annotations

import base64
import gzip
import io
import ipaddress
import json
import os
import socket
import subprocess
import sys
import tarfile
import time
import tracemalloc
from pathlib import Path

import lance
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pydantic import ValidationError

from prx_data.ingest.driver import EmptySource, ingest_source
from prx_data.ingest.http import netguard
from prx_data.ingest.http.download_session import download_many
from prx_data.ingest.read.whole_source import read_source
from prx_data.ingest.registry import DownloadConfig, RegisteredSource, SourceSpec
from prx_data_tests import images
from prx_data_tests.http_fixtures import (
    LOCAL_NETWORKS,
    HTTPTestServer,
    Response,
    redirect,
    trickle,
)

pytestmark = pytest.mark.timeout(60)

SECRET = b"root:x:0:0:secret-line-that-must-never-be-stored\n"


def source(tmp_path: Path, **spec) -> RegisteredSource:
    spec.setdefault("name", "hostile")
    return RegisteredSource(SourceSpec(**spec), tmp_path / "spec.yaml")


def ingest(tmp_path: Path, src: RegisteredSource, table: str = "t.lance"):
    uri = str(tmp_path / table)
    stats = ingest_source(src, uri)
    cols = ["source_key", "status", "error", "source_caption", "license", "image_sha256", "image_format"]
    rows = {r["source_key"]: r for r in lance.dataset(uri).to_table(columns=cols).to_pylist()}
    return stats, rows


def stored_images(tmp_path: Path, table: str = "t.lance") -> list[bytes]:
    ds = lance.dataset(str(tmp_path / table))
    return [b.read() for b in ds.take_blobs("image", indices=list(range(ds.count_rows()))) if b is not None]


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    outside.mkdir()
    path = outside / "passwd"
    path.write_bytes(SECRET)
    return path


# -- 1, 2: containment ---------------------------------------------------------------------------


def test_symlink_out_of_an_image_folder_is_an_error_row_never_read(tmp_path, secret):
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "ok.jpg").write_bytes(images.jpeg(seed=1))
    (folder / "passwd.jpg").symlink_to(secret)
    (folder / "etc").symlink_to(secret.parent, target_is_directory=True)
    (folder / "inside.jpg").symlink_to(folder / "ok.jpg")
    _, rows = ingest(tmp_path, source(tmp_path, shape="image_folder", location=str(folder)))
    assert rows["passwd.jpg"]["status"] == "outside_root" and "outside the source root" in rows["passwd.jpg"]["error"]
    assert rows["etc"]["status"] == "outside_root"
    assert rows["ok.jpg"]["status"] == rows["inside.jpg"]["status"] == "ok"
    assert all(SECRET not in blob for blob in stored_images(tmp_path))


def test_sidecar_symlink_out_of_the_root_is_not_read(tmp_path, secret):
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "a.jpg").write_bytes(images.jpeg(seed=1))
    (folder / "a.txt").symlink_to(secret)
    _, rows = ingest(tmp_path, source(tmp_path, shape="image_folder", location=str(folder)))
    assert rows["a.jpg"]["status"] == "invalid_record" and "outside the source root" in rows["a.jpg"]["error"]
    assert rows["a.jpg"]["source_caption"] is None


def test_image_kind_path_cannot_leave_the_root_unless_the_spec_widens_it(tmp_path, secret):
    meta = tmp_path / "meta"
    meta.mkdir()
    (meta / "here.jpg").write_bytes(images.jpeg(seed=2))
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "there.jpg").write_bytes(images.jpeg(seed=3))
    records = [
        {"id": "here", "p": "here.jpg"},
        {"id": "climb", "p": "../" * 12 + str(secret).lstrip("/")},
        {"id": "absolute", "p": str(secret)},
        {"id": "etc", "p": "/etc/hostname"},
        {"id": "sibling", "p": "../shared/there.jpg"},
    ]
    pq.write_table(pa.Table.from_pylist(records), meta / "items.parquet")
    fields = {"key": "id", "image": "p", "image_kind": "path"}
    _, rows = ingest(tmp_path, source(tmp_path, shape="parquet", location=str(meta / "items.parquet"), fields=fields))
    assert rows["here"]["status"] == "ok"
    for key in ("climb", "absolute", "etc", "sibling"):
        assert rows[key]["status"] == "outside_root", (key, rows[key])
    assert all(SECRET not in blob for blob in stored_images(tmp_path))

    # An explicit root widens containment to the shared folder, and no further.
    wide = source(tmp_path, shape="parquet", location=str(meta / "items.parquet"), fields=fields, root=str(tmp_path / "."))
    _, rows = ingest(tmp_path, wide, "wide.lance")
    assert rows["sibling"]["status"] == "ok"
    assert rows["etc"]["status"] == "outside_root"


# -- 3: no private fetches -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "address, why",
    [
        ("169.254.169.254", "link-local"),
        ("127.0.0.1", "loopback"),
        ("10.1.2.3", "private"),
        ("192.168.0.1", "private"),
        ("100.64.0.1", "not a public address"),
        ("0.0.0.0", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("240.0.0.1", "reserved"),
        ("::1", "loopback"),
        ("::ffff:169.254.169.254", "link-local"),
        ("fe80::1", "link-local"),
        ("fc00::1", "private"),
        ("64:ff9b::a9fe:a9fe", "link-local"),
    ],
)
def test_refusal_covers_every_private_range(address, why):
    assert netguard.refusal(ipaddress.ip_address(address)) == why
    assert netguard.refusal(ipaddress.ip_address(address), netguard.parse_networks(["0.0.0.0/0", "::/0"])) is None


def test_public_addresses_pass():
    for address in ("93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946", "8.8.8.8"):
        assert netguard.refusal(ipaddress.ip_address(address)) is None


def _fetch(urls: dict[str, str], **config) -> dict:
    cfg = DownloadConfig(**{"timeout_s": 1.0, "retries": 1, "backoff_s": 0.01, **config})
    return {r.key: r for r in download_many(urls.items(), cfg)}


def test_private_addresses_are_refused_in_every_notation(http_server: HTTPTestServer):
    http_server.add_route("/meta", b"instance secrets")
    port = http_server.port
    urls = {
        "dotted": f"http://127.0.0.1:{port}/meta",
        "decimal": f"http://2130706433:{port}/meta",
        "octal": f"http://0177.0.0.1:{port}/meta",
        "hex": f"http://0x7f.1:{port}/meta",
        "short": f"http://127.1:{port}/meta",
        "name": f"http://localhost:{port}/meta",
        "v6": f"http://[::1]:{port}/meta",
        "mapped": f"http://[::ffff:127.0.0.1]:{port}/meta",
        "metadata": "http://169.254.169.254/latest/meta-data/",
        "zero": f"http://0.0.0.0:{port}/meta",
    }
    results = _fetch(urls)
    for key, result in results.items():
        if key == "octal":  # httpx already refuses to parse it; either way it is never fetched
            assert result.status.value in ("refused_address", "download_failed"), result
            continue
        assert result.status.value == "refused_address", (key, result)
        assert "refused" in result.error
    assert http_server.hits("/meta") == 0


def test_redirect_to_a_private_address_is_refused(http_server: HTTPTestServer):
    http_server.add_route("/hop", redirect("http://169.254.169.254/latest/meta-data/"))
    http_server.add_route("/hop-decimal", redirect("http://2852039166/latest/meta-data/"))
    results = _fetch({"a": http_server.url("/hop"), "b": http_server.url("/hop-decimal")}, allow_networks=["127.0.0.1/32"])
    for result in results.values():
        assert result.status.value == "refused_address" and "redirect to" in result.error and "169.254.169.254" in result.error
    assert http_server.hits("/hop") == 1


def test_allow_list_lets_a_local_test_server_through(http_server: HTTPTestServer):
    http_server.add_route("/a", b"ok")
    assert _fetch({"a": http_server.url("/a")}, allow_networks=LOCAL_NETWORKS)["a"].data == b"ok"


def test_dns_rebinding_is_checked_at_connect_time(http_server: HTTPTestServer, monkeypatch):
    """The name resolves to a public address first, then to loopback: the check is on the
    address each connection actually uses, so the second answer is refused."""
    http_server.add_route("/x", b"internal")
    answers = iter(["203.0.113.7", "127.0.0.1", "127.0.0.1", "127.0.0.1"])
    real = socket.getaddrinfo

    def fake(host, port, *args, **kwargs):
        if host == "rebind.example":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (next(answers), port))]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", fake)
    # TEST-NET-3 stands in for a public address (allowed here); nothing listens there, so the
    # first attempt fails and the retry resolves again, now to loopback.
    result = _fetch({"r": f"http://rebind.example:{http_server.port}/x"}, retries=2, timeout_s=0.3, allow_networks=["203.0.113.0/24"])["r"]
    assert result.status.value == "refused_address" and "127.0.0.1" in result.error
    assert http_server.hits("/x") == 0


# -- 4: deadline -----------------------------------------------------------------------------------


def test_a_trickling_server_cannot_hold_a_download_past_its_deadline(http_server: HTTPTestServer):
    http_server.add_route("/drip", trickle(0.2, total=200))
    started = time.monotonic()
    result = _fetch({"d": http_server.url("/drip")}, timeout_s=1.0, deadline_s=1.5, retries=2, allow_networks=LOCAL_NETWORKS)["d"]
    elapsed = time.monotonic() - started
    assert result.status.value == "download_failed" and "deadline" in result.error
    assert elapsed < 3.0, elapsed


# -- 5: caps while streaming -----------------------------------------------------------------------


def _peak_python_bytes(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_an_oversized_file_is_refused_without_being_read(tmp_path):
    folder = tmp_path / "folder"
    folder.mkdir()
    with open(folder / "huge.jpg", "wb") as handle:  # sparse: no disk space used
        handle.truncate(300 * 1024 * 1024)
    src = source(tmp_path, shape="image_folder", location=str(folder), max_bytes=1024 * 1024)
    peak = _peak_python_bytes(lambda: list(read_source(src)))
    (item,) = list(read_source(src))
    assert item.error_status == "too_large" and item.data is None
    assert peak < 8 * 1024 * 1024, peak


def test_an_oversized_tar_member_is_refused_without_being_read(tmp_path):
    data = b"\0" * (20 * 1024 * 1024)
    with tarfile.open(tmp_path / "shard.tar", "w") as tar:
        for name, body in (("big.jpg", data), ("small.jpg", images.jpeg(seed=4))):
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    del data
    src = source(tmp_path, shape="webdataset", location=str(tmp_path / "shard.tar"), max_bytes=1024 * 1024)
    peak = _peak_python_bytes(lambda: list(read_source(src)))
    items = {i.key: i for i in read_source(src)}
    assert items["big"].error_status == "too_large" and items["small"].data is not None
    assert peak < 8 * 1024 * 1024, peak


def test_a_gzip_bomb_response_is_capped_while_inflating(http_server: HTTPTestServer):
    bomb = gzip.compress(b"\0" * (64 * 1024 * 1024))
    http_server.add_route("/bomb.jpg", lambda _req: Response(200, bomb, {"Content-Encoding": "gzip"}))
    cfg = dict(max_bytes=1024 * 1024, allow_networks=LOCAL_NETWORKS)
    peak = _peak_python_bytes(lambda: _fetch({"b": http_server.url("/bomb.jpg")}, **cfg))
    assert _fetch({"b": http_server.url("/bomb.jpg")}, **cfg)["b"].status.value == "too_large"
    assert peak < 16 * 1024 * 1024, peak


_BOMB_CHILD = """
import resource, sys
from prx_data.ingest.rows.image_probe import probe_image
data = open(sys.argv[1], 'rb').read()
probe_image(b'', 1)  # imports and warm-up before the baseline
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
probe = probe_image(data, 100_000_000)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(probe.status.value, probe.width, probe.height, (after - before) * 1024)
"""


def test_pixel_bomb_is_rejected_from_the_header_with_bounded_memory(tmp_path):
    """A 30000x30000 PNG of ~110 KB: before, reading its EXIF decoded every pixel (~860 MB)."""
    bomb = tmp_path / "bomb.png"
    bomb.write_bytes(images.decompression_bomb(30_000))
    out = subprocess.run(
        [sys.executable, "-c", _BOMB_CHILD, str(bomb)],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[2],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    status, width, height, grown = out.stdout.split()
    assert (status, width, height) == ("too_large", "30000", "30000")
    assert int(grown) < 50 * 1024 * 1024, f"probe grew RSS by {int(grown) / 1e6:.0f} MB"


# -- 6, 7: nothing silent, formats from the header -------------------------------------------------


def test_every_file_in_a_folder_is_a_row(tmp_path):
    folder = tmp_path / "folder"
    folder.mkdir()
    from PIL import Image

    buf = io.BytesIO()
    images.photo_like(64, 48, 1).save(buf, "AVIF")
    (folder / "photo.avif").write_bytes(buf.getvalue())
    (folder / "loop.jpg").symlink_to(folder / "loop.jpg")
    (folder / "ps.jpg").write_bytes(b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\n" * 4)
    (folder / "photo.heic").write_bytes(b"\0\0\0\x18ftypheic\0\0\0\0mif1heic" + b"\0" * 64)
    (folder / "noext").write_bytes(images.jpeg(seed=5))
    os.mkfifo(folder / "pipe.jpg")
    (folder / "locked.jpg").write_bytes(images.jpeg(seed=6))
    os.chmod(folder / "locked.jpg", 0)
    _, rows = ingest(tmp_path, source(tmp_path, shape="image_folder", location=str(folder)))
    assert rows["photo.avif"]["status"] == "ok" and rows["photo.avif"]["image_format"] == "AVIF"
    assert rows["loop.jpg"]["status"] == "unreadable" and "symlink loop" in rows["loop.jpg"]["error"]
    assert rows["ps.jpg"]["status"] == "unsupported_format" and "EPS" in rows["ps.jpg"]["error"]
    assert rows["photo.heic"]["status"] == "unsupported_format" and "HEIC" in rows["photo.heic"]["error"]
    assert rows["noext"]["status"] == "ok"
    assert rows["pipe.jpg"]["status"] == "unreadable" and "FIFO" in rows["pipe.jpg"]["error"]
    if os.geteuid() != 0:  # root reads a mode-000 file anyway
        assert rows["locked.jpg"]["status"] == "unreadable"
    assert Image  # noqa: B018


def test_format_allow_list_is_configurable(tmp_path):
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "a.jpg").write_bytes(images.jpeg(seed=1))
    (folder / "b.jpg").write_bytes(images.png(images.photo_like(32, 32)))  # a PNG named .jpg
    _, rows = ingest(tmp_path, source(tmp_path, shape="image_folder", location=str(folder), formats=["jpg"]))
    assert rows["a.jpg"]["status"] == "ok"
    assert rows["b.jpg"]["status"] == "unsupported_format" and "PNG" in rows["b.jpg"]["error"]
    with pytest.raises(ValidationError, match="unknown format"):
        SourceSpec(name="x", shape="image_folder", location=".", formats=["EPS"])


# -- 8, 9: strict, typed records -------------------------------------------------------------------


def test_sidecars_must_be_utf8_and_captions_strings(tmp_path):
    folder = tmp_path / "folder"
    folder.mkdir()
    for name in ("bad_json", "bad_txt", "nested", "number", "good"):
        (folder / f"{name}.jpg").write_bytes(images.jpeg(seed=hash(name) % 100))
    (folder / "bad_json.json").write_bytes(b'{"caption": "caf\xe9"}')
    (folder / "bad_txt.txt").write_bytes(b"caf\xe9")
    (folder / "nested.json").write_text(json.dumps({"caption": {"en": "nested", "de": "verschachtelt"}}))
    (folder / "number.json").write_text(json.dumps({"caption": 42}))
    (folder / "good.txt").write_text("Café au lait.")
    _, rows = ingest(tmp_path, source(tmp_path, shape="image_folder", location=str(folder)))
    assert rows["bad_json.jpg"]["status"] == "invalid_record" and "not UTF-8" in rows["bad_json.jpg"]["error"]
    assert rows["bad_txt.jpg"]["status"] == "invalid_record" and "not UTF-8" in rows["bad_txt.jpg"]["error"]
    assert rows["nested.jpg"]["status"] == "invalid_record" and "caption_language" in rows["nested.jpg"]["error"]
    assert rows["number.jpg"]["status"] == "invalid_record" and "must be a string" in rows["number.jpg"]["error"]
    assert rows["good.jpg"]["source_caption"] == "Café au lait."

    chosen = source(tmp_path, shape="image_folder", location=str(folder), fields={"caption_language": "en"})
    _, rows = ingest(tmp_path, chosen, "lang.lance")
    assert rows["nested.jpg"]["status"] == "ok" and rows["nested.jpg"]["source_caption"] == "nested"


def test_tabular_sources_must_name_their_key_or_opt_in_to_positions(tmp_path):
    pq.write_table(pa.Table.from_pylist([{"img": images.jpeg(seed=7)}]), tmp_path / "a.parquet")
    with pytest.raises(ValidationError, match="fields.key is required"):
        SourceSpec(name="x", shape="parquet", location="a.parquet", fields={"image": "img"})
    src = source(tmp_path, shape="parquet", location=str(tmp_path / "a.parquet"), fields={"image": "img", "positional_keys": True})
    stats, rows = ingest(tmp_path, src)
    assert set(rows) == {"a.parquet:0"} and any("position" in w for w in stats.warnings)


def test_bad_values_are_error_rows_and_good_records_still_ingest(tmp_path):
    good = base64.b64encode(images.jpeg(seed=8)).decode()
    lines = [
        {"k": "good", "img": good, "emb": [1, 2]},
        {"k": "negative", "img": -1},
        {"k": "huge", "img": 10**12},
        {"k": "struct", "img": {"bytes": good}},
        {"k": "null-in-emb", "img": good, "emb": [1, None]},
        {"k": "string-emb", "img": good, "emb": "1,2"},
        {"k": "short-emb", "img": good, "emb": [1]},
        {"k": "caption-list", "img": good, "cap": ["a"]},
        {"k": True, "img": good},
        {"img": good},
    ]
    body = "".join(json.dumps(line) + "\n" for line in lines).encode() + b'{"k": "latin1", "cap": "caf\xe9", "img": "x"}\n'
    (tmp_path / "items.jsonl").write_bytes(body)
    fields = {"key": "k", "image": "img", "caption": "cap", "embedding": "emb"}
    src = source(tmp_path, shape="jsonl", location=str(tmp_path / "items.jsonl"), fields=fields, embedding_dim=2)
    stats, rows = ingest(tmp_path, src)
    assert rows["good"]["status"] == "ok"
    for key in (
        "negative",
        "huge",
        "struct",
        "null-in-emb",
        "string-emb",
        "short-emb",
        "caption-list",
        "items.jsonl:9",
        "items.jsonl:10",
        "items.jsonl:11",
    ):
        assert rows[key]["status"] == "invalid_record", (key, rows[key])
    assert stats.seen == len(rows) == 11


def test_an_unreadable_file_is_one_row_and_its_neighbours_still_ingest(tmp_path):
    folder = tmp_path / "pq"
    folder.mkdir()
    table = pa.Table.from_pylist([{"id": f"g{i}", "img": images.jpeg(seed=10 + i)} for i in range(3)])
    pq.write_table(table, folder / "good.parquet")
    pq.write_table(table.set_column(0, "id", pa.array(["b0", "b1", "b2"])), folder / "bad.parquet")
    data = (folder / "bad.parquet").read_bytes()
    src = source(tmp_path, shape="parquet", location=str(folder / "*.parquet"), fields={"key": "id", "image": "img"})
    ingest(tmp_path, src)
    (folder / "bad.parquet").write_bytes(data[: len(data) // 2])  # truncated after the first run
    stats, rows = ingest(tmp_path, src)
    assert rows["bad.parquet:unreadable"]["status"] == "unreadable"
    assert all(rows[f"g{i}"]["status"] == "ok" for i in range(3))
    # The rows that came from the unreadable file are kept until a run can read it again.
    assert {"b0", "b1", "b2"} <= set(rows) and stats.removals_deferred == 3


# -- 10: WebDataset grouping ---------------------------------------------------------------------


def test_webdataset_members_group_by_key_anywhere_and_duplicates_are_errors(tmp_path):
    members = [
        ("dup.jpg", images.jpeg(seed=20)),
        ("other.jpg", images.jpeg(seed=21)),
        ("dup.txt", b"the caption that came later"),
        ("twice.jpg", images.jpeg(seed=22)),
        ("twice.jpg", images.jpeg(seed=23)),
        ("link.jpg", None),
    ]
    with tarfile.open(tmp_path / "s.tar", "w") as tar:
        for name, body in members:
            info = tarfile.TarInfo(name)
            if body is None:
                info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
                tar.addfile(info)
                continue
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    _, rows = ingest(tmp_path, source(tmp_path, shape="webdataset", location=str(tmp_path / "s.tar")))
    assert rows["dup"]["status"] == "ok" and rows["dup"]["source_caption"] == "the caption that came later"
    assert rows["twice"]["status"] == "invalid_record" and "duplicate" in rows["twice"]["error"]
    assert rows["link"]["status"] == "unreadable"
    assert set(rows) == {"dup", "other", "twice", "link"}


# -- issue 16: safe by default, complete change detection --------------------------------------------


def test_an_empty_match_keeps_the_last_table_unless_allowed(tmp_path):
    folder = tmp_path / "pq"
    folder.mkdir()
    pq.write_table(pa.Table.from_pylist([{"id": "a", "img": images.jpeg(seed=30)}]), folder / "a.parquet")
    spec = dict(shape="parquet", location=str(folder / "*.parquet"), fields={"key": "id", "image": "img"})
    ingest(tmp_path, source(tmp_path, **spec))
    (folder / "a.parquet").unlink()  # the mount vanished
    with pytest.raises(EmptySource, match="allow_empty"):
        ingest_source(source(tmp_path, **spec), str(tmp_path / "t.lance"))
    assert lance.dataset(str(tmp_path / "t.lance")).count_rows() == 1
    stats, rows = ingest(tmp_path, source(tmp_path, **spec, allow_empty=True))
    assert rows == {} and stats.removed == 1


def test_metadata_edits_are_detected_and_keep_image_work(tmp_path):
    folder = tmp_path / "folder"
    folder.mkdir()
    for name in ("a", "b", "c"):
        (folder / f"{name}.jpg").write_bytes(images.jpeg(seed=ord(name)))
    (folder / "a.txt").write_text("first caption")
    (folder / "c.txt").write_text("to be removed")
    src = source(tmp_path, shape="image_folder", location=str(folder), license="cc0")
    ingest(tmp_path, src)
    ds = lance.dataset(str(tmp_path / "t.lance"))
    ds.add_columns({"phash": "CAST(42 AS BIGINT)"})  # what the phash stage would have written

    (folder / "a.txt").write_text("edited caption")
    (folder / "b.json").write_text(json.dumps({"caption": "added later"}))
    (folder / "c.txt").unlink()
    stats, rows = ingest(tmp_path, source(tmp_path, shape="image_folder", location=str(folder), license="cc-by-4.0"))
    assert (stats.metadata_updated, stats.updated, stats.new, stats.unchanged) == (3, 0, 0, 0)
    assert rows["a.jpg"]["source_caption"] == "edited caption"
    assert rows["b.jpg"]["source_caption"] == "added later"
    assert rows["c.jpg"]["source_caption"] is None
    assert {r["license"] for r in rows.values()} == {"cc-by-4.0"}
    phash = lance.dataset(str(tmp_path / "t.lance")).to_table(columns=["phash"]).column("phash").to_pylist()
    assert phash == [42, 42, 42]

    stats, _ = ingest(tmp_path, source(tmp_path, shape="image_folder", location=str(folder), license="cc-by-4.0"))
    assert (stats.metadata_updated, stats.unchanged) == (0, 3)


def test_url_and_embedding_edits_are_detected(tmp_path):
    def write(url: str, emb: list[float]) -> None:
        pq.write_table(pa.Table.from_pylist([{"id": "a", "img": images.jpeg(seed=40), "u": url, "e": emb}]), tmp_path / "a.parquet")

    fields = {"key": "id", "image": "img", "url": "u", "embedding": "e"}
    spec = dict(shape="parquet", location=str(tmp_path / "a.parquet"), fields=fields, embedding_dim=2)
    write("https://example.com/a.jpg", [0.1, 0.2])
    ingest(tmp_path, source(tmp_path, **spec))
    stats, _ = ingest(tmp_path, source(tmp_path, **spec))
    assert stats.unchanged == 1  # float32 storage does not read as a change
    write("https://example.com/b.jpg", [0.1, 0.2])
    assert ingest(tmp_path, source(tmp_path, **spec))[0].metadata_updated == 1
    write("https://example.com/b.jpg", [0.3, 0.2])
    assert ingest(tmp_path, source(tmp_path, **spec))[0].metadata_updated == 1
    emb = lance.dataset(str(tmp_path / "t.lance")).to_table(columns=["embedding"]).column("embedding").to_pylist()
    assert emb[0] == pytest.approx([0.3, 0.2])
