"""Opt-outs only grow by mistake, never shrink (issue 22, items 2-4): a request file that breaks
or vanishes, or an opt-out folder that goes away, keeps the last applied version in force; only
``prx-data optout withdraw`` removes a request, with a receipt. Every file the opt-out and
lineage commands read is typed and capped (FIFO, /dev/zero, a directory: a clear error, no hang).
Checked through the training loader on local and moto S3 roots."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
from contextlib import contextmanager
from pathlib import Path

import lance
import pytest
import yaml
from PIL import Image, ImageDraw

from prx_data.app.cli import main
from prx_data.core.ids import sample_id
from prx_data.core.storage import streaming_env
from prx_data.imaging.phash import hamming, phash_bytes
from prx_data_tests.curation.optout_world import Item, World, fingerprint, variant_bytes
from prx_data_tests.images import decompression_bomb

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

A, B, X = sample_id("s1", "a"), sample_id("s1", "b"), sample_id("s2", "x")


def _world(root: Path, lance_root: str, mds_root: str, options: dict | None) -> World:
    w = World(root=root, lance_root=lance_root, mds_root=mds_root, options=options)
    w.sources["s1"] = {
        "a": Item((0, "exact"), "https://a.example.org/a.jpg"),
        "b": Item((1, "exact"), "https://b.example.org/b.jpg"),
        **{k: Item((3 + i, "exact"), f"https://{k}.example.org/{k}.jpg") for i, k in enumerate("cde")},
    }
    w.sources["s2"] = {"x": Item((2, "exact"), "https://cdn.example.net/x.jpg")}
    for name in w.sources:
        w.chain(name)
    w.merge()
    w.apply()
    return w


@pytest.fixture
def world(storage_root, tmp_path, monkeypatch) -> World:
    for name, value in streaming_env(storage_root.options).items() if storage_root.options else ():
        monkeypatch.setenv(name, value)
    w = _world(tmp_path / "data", storage_root.uri("lance"), storage_root.uri("mds"), storage_root.options)
    w.cache = tmp_path / "cache"  # type: ignore[attr-defined]  # where _yielded reads a remote root
    return w


@pytest.fixture
def local_world(data_root) -> World:
    """A local world at the CLI's data root (PRX_DATA_ROOT), for the commands themselves."""
    return _world(data_root, str(data_root / "lance"), str(data_root / "mds"), None)


_reads = 0


def _yielded(w: World) -> set[str]:
    global _reads
    _reads += 1
    cache = getattr(w, "cache", None)
    return w.yielded(cache / str(_reads) if cache is not None and w.options else None)


def _file(w: World, request: dict, name: str | None = None) -> Path:
    path = w.root / "optout" / (name or f"{request['id']}.yaml")
    path.write_text(yaml.safe_dump(request))
    return path


@contextmanager
def _deadline(seconds: int):
    """A hang (a blocking read of a FIFO) fails the test instead of wedging it."""

    def _timeout(*_):
        raise TimeoutError(f"no answer within {seconds}s: the read blocked")

    previous = signal.signal(signal.SIGALRM, _timeout)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


# Item 2: a broken or vanished request keeps its last applied version ---------------------------


# One request per way of breaking, all in one world: a world costs a pipeline run per storage.
BROKEN = {"bad_yaml": "a", "bad_schema": "c", "not_a_file": "d", "vanished": "e"}


def _break(path: Path, breakage: str) -> None:
    if breakage == "bad_yaml":
        path.write_text(f"id: {path.stem}\nsource_keys: [s1:a\n")
    elif breakage == "bad_schema":
        path.write_text(f"id: {path.stem}\nsource_keys: 3\n")
    elif breakage == "not_a_file":
        path.unlink()
        path.mkdir()  # a directory where the request was
    else:
        path.unlink()


def test_broken_or_vanished_requests_keep_excluding_their_samples(world):
    paths = {b: _file(world, {"id": f"req-{b}", "source_keys": [f"s1:{key}"]}) for b, key in BROKEN.items()}
    excluded = {sample_id("s1", key) for key in BROKEN.values()}
    world.apply()
    assert not excluded & _yielded(world)

    for breakage, path in paths.items():
        _break(path, breakage)
    report = world.apply().optouts
    assert set(report.kept) == {f"req-{b}" for b in BROKEN}, report.kept
    for path in paths.values():
        assert any(str(path) in e for e in report.errors), (path, report.errors)
    yielded = _yielded(world)
    assert not excluded & yielded, "a broken request re-admitted its sample"
    assert {B, X} <= yielded
    audit = {
        r["request_id"]: r for r in lance.dataset(world.paths.optout_audit_table(), storage_options=world.options).to_table().to_pylist()
    }
    assert audit.keys() == set(report.kept)
    for breakage, key in BROKEN.items():
        row = audit[f"req-{breakage}"]
        assert row["state"].startswith("kept:") and json.loads(row["request_json"])["source_keys"] == [f"s1:{key}"]

    # Applying again changes nothing: the kept version is kept from the kept version.
    assert world.apply().optouts.kept.keys() == set(report.kept)
    assert not excluded & _yielded(world)


def test_a_vanished_folder_withdraws_nothing(world):
    _file(world, {"id": "req-a", "source_keys": ["s1:a"]})
    _file(world, {"id": "req-x", "urls": ["https://cdn.example.net/x.jpg"]})
    world.apply()
    shutil.rmtree(world.root / "optout")
    report = world.apply().optouts
    assert report.errors and "does not exist" in report.errors[0] and "nothing is withdrawn" in report.errors[0]
    assert set(report.kept) == {"req-a", "req-x"}
    yielded = _yielded(world)
    assert not {A, X} & yielded and B in yielded


def test_one_bad_request_never_blocks_the_others(world):
    """A FIFO and a device among the request files: reported, never read; the rest apply."""
    folder = world.root / "optout"
    os.mkfifo(folder / "fifo.yaml")
    os.symlink("/dev/zero", folder / "zero.yaml")
    _file(world, {"id": "req-x", "urls": ["https://cdn.example.net/x.jpg"]})
    fifo_image = world.root / "face.jpg"
    os.mkfifo(fifo_image)
    _file(world, {"id": "req-img", "image_files": [str(fifo_image)], "source_keys": ["s1:b"]})
    with _deadline(120):
        report = world.apply().optouts
    assert sorted(e.split(" ", 1)[0] for e in report.errors if "fifo.yaml" in e or "zero.yaml" in e) == ["request", "request"], (
        report.errors
    )
    assert any("fifo.yaml" in e and "FIFO" in e for e in report.errors)
    assert any("zero.yaml" in e and "device" in e for e in report.errors)
    problems = {r["request_id"]: r["problems"] for r in report.audit.to_pylist()}
    assert any("face.jpg" in p and "FIFO" in p for p in problems["req-img"])
    yielded = _yielded(world)
    assert not {X, B} & yielded and A in yielded


# The commands: exit codes, withdraw and its receipt, capped reads -----------------------------


def test_cli_apply_fails_while_a_request_is_broken_and_withdraw_is_explicit(local_world, capsys):
    w = local_world
    root = str(w.root)
    path = _file(w, {"id": "req-a", "source_keys": ["s1:a"]})
    assert main(["optout", "apply", "--root", root]) == 0
    path.write_text("id: req-a\nsource_keys: [s1:a\n")
    capsys.readouterr()
    assert main(["optout", "apply", "--root", root]) == 1
    err = capsys.readouterr().err
    assert str(path) in err and "kept in force" in err
    assert A not in _yielded(w)
    assert main(["optout", "report", "--id", "req-a", "--root", root]) == 0
    assert "**kept:" in capsys.readouterr().out

    assert main(["optout", "withdraw", "--id", "req-a", "--reason", "the requester asked to be included again", "--root", root]) == 0
    out = capsys.readouterr().out
    assert "withdrawn" in out and str(path) in out
    assert not path.exists()
    assert A in _yielded(w), "a withdrawn request's sample is yielded again"
    assert main(["optout", "report", "--id", "req-a", "--json", "--root", root]) == 0
    r = json.loads(capsys.readouterr().out)
    (receipt,) = r["withdrawn"]
    assert receipt["reason"] == "the requester asked to be included again" and receipt["files_removed"] == [str(path)]
    assert json.loads(receipt["request_json"])["source_keys"] == ["s1:a"]
    assert main(["optout", "report", "--id", "req-a", "--root", root]) == 0
    assert "Withdrawn on purpose" in capsys.readouterr().out
    # A clean apply afterwards: nothing kept, exit 0.
    assert main(["optout", "apply", "--root", root]) == 0
    assert main(["optout", "withdraw", "--id", "never-filed", "--reason", "x", "--root", root]) == 2


def test_cli_apply_on_a_vanished_folder_exits_non_zero(local_world, capsys):
    _file(local_world, {"id": "req-a", "source_keys": ["s1:a"]})
    assert main(["optout", "apply", "--root", str(local_world.root)]) == 0
    shutil.rmtree(local_world.root / "optout")
    capsys.readouterr()
    assert main(["optout", "apply", "--root", str(local_world.root)]) == 1
    assert "does not exist" in capsys.readouterr().err
    assert A not in _yielded(local_world)


@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "directory", "too_many_pixels"])
def test_add_and_lineage_refuse_odd_image_files_without_hanging(local_world, tmp_path, capsys, kind):
    if kind == "fifo":
        path = tmp_path / "face.jpg"
        os.mkfifo(path)
        expected = "FIFO"
    elif kind == "dev_zero":
        path = Path("/dev/zero")
        expected = "device"
    elif kind == "directory":
        path = tmp_path / "folder.jpg"
        path.mkdir()
        expected = "directory"
    else:
        # 12000 x 12000 = 144 M pixels over a small file: refused from the header, nothing decoded.
        path = tmp_path / "bomb.png"
        path.write_bytes(decompression_bomb())
        expected = "exceeds the limit"
    root = str(local_world.root)
    with _deadline(60):
        assert main(["optout", "add", "--id", "req-odd", "--image", str(path), "--root", root]) == 2
        assert expected in capsys.readouterr().err
        assert not (local_world.root / "optout" / "req-odd.yaml").exists()
        assert main(["lineage", "--image", str(path), "--root", root]) == 2
        assert expected in capsys.readouterr().err


def test_add_and_lineage_still_accept_a_photo(local_world, capsys):
    image = local_world.root / "mine.jpg"
    image.write_bytes(variant_bytes(0, "exact"))
    root = str(local_world.root)
    assert main(["lineage", "--image", str(image), "--json", "--root", root]) == 0
    assert {r["row"]["sample_id"] for r in json.loads(capsys.readouterr().out)} == {A}
    # A marked copy (a white patch: 12 bits off here) is found within its Hamming distance of the
    # stored hash, not nearer.
    marked = Image.open(io.BytesIO(variant_bytes(0, "exact"))).convert("RGB")
    ImageDraw.Draw(marked).rectangle((0, 0, 100, 100), fill=(255, 255, 255))
    copy = local_world.root / "marked.jpg"
    marked.save(copy, "JPEG", quality=90)
    distance = hamming(phash_bytes(copy.read_bytes()), fingerprint(0, "exact")[0])
    assert distance > 0
    for asked, found in ((distance, {A}), (distance - 1, set())):
        code = main(["lineage", "--image", str(copy), "--distance", str(asked), "--json", "--root", root])
        out = capsys.readouterr().out
        assert code == (0 if found else 1)  # 1: nothing matched
        assert {r["row"]["sample_id"] for r in json.loads(out or "[]")} == found
    assert main(["optout", "add", "--id", "req-mine", "--image", str(image), "--root", root]) == 0
    assert main(["optout", "apply", "--root", root]) == 0
    assert A not in _yielded(local_world)
