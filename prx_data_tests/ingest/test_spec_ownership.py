"""A second spec with a built source's name never takes the source over: ``sources/50-good.yaml``
built ``good``; a new ``sources/00-other.yaml`` saying ``name: good`` (sorting first, another
folder) is rejected with an error naming both files, by ``prx-data sources``, ``prx-data run``
(which keeps ``good``'s rows) and the registry sensor (which requests no re-ingest, and retires
nothing when no owner can be told). Ownership is recorded beside the table: local and s3://."""

from __future__ import annotations

import contextlib
import io
import os

import dagster as dg
import lance
import pytest

from prx_data.app.cli import main
from prx_data.core.paths import StoragePaths
from prx_data.core.settings import get_settings
from prx_data.core.storage import locate, try_read_bytes
from prx_data_tests import images
from prx_data_tests.automation.conftest import evaluate_sensor
from prx_data_tests.conftest import pin_fixture_publication

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
SENSOR = "source_registry_sensor"


def _folder(path, keys: list[str], seed: int):
    path.mkdir(parents=True)
    for i, key in enumerate(keys):
        (path / f"{key}.jpg").write_bytes(images.jpeg(512, 512, seed=seed + i))
        (path / f"{key}.txt").write_text(f"a photo called {key}")
    return path


def _env(monkeypatch, data, lance_root: str, mds_root: str, server=None) -> None:
    for name in list(os.environ):
        if name.startswith(("PRX_", "AWS_")) and name != "PRX_RAY_ADDRESS":
            monkeypatch.delenv(name)
    env = {"PRX_DATA_ROOT": str(data), "PRX_LANCE_ROOT": lance_root, "PRX_MDS_ROOT": mds_root}
    for name, value in (server.env(**env) if server else env).items():
        monkeypatch.setenv(name, value)
    pin_fixture_publication(monkeypatch)
    get_settings.cache_clear()


@pytest.fixture
def built(storage_root, tmp_path, monkeypatch):
    """``good`` from 50-good.yaml, ingested (the product's ingest, which records the owner)."""
    from prx_data.ingest.driver import ingest_source
    from prx_data.ingest.ownership import SpecOwners
    from prx_data.ingest.registry import load_registry

    data = tmp_path / "data"
    (data / "sources").mkdir(parents=True)
    (data / "optout").mkdir()
    _folder(tmp_path / "good-photos", ["g0", "g1"], seed=10)
    _folder(tmp_path / "other-photos", ["o0"], seed=50)
    (data / "sources" / "50-good.yaml").write_text(f"name: good\nshape: image_folder\nlocation: {tmp_path / 'good-photos'}\n")
    _env(monkeypatch, data, storage_root.uri("lance"), storage_root.uri("mds"), storage_root.server)
    settings = get_settings()
    paths = StoragePaths.from_settings(settings)
    source = load_registry(settings.sources_dir, SpecOwners.of(settings)).get("good")
    ingest_source(source, paths.raw_table("good"), storage_options=settings.storage_options)
    yield data, paths, settings.storage_options
    get_settings.cache_clear()


def _newcomer(data, folder=None) -> None:
    folder = folder or data.parent / "other-photos"
    (data / "sources" / "00-other.yaml").write_text(f"name: good\nshape: image_folder\nlocation: {folder}\n")


def _keys(paths: StoragePaths, options) -> set[str]:
    ds = lance.dataset(paths.raw_table("good"), storage_options=options)
    return set(ds.to_table(columns=["source_key"]).column("source_key").to_pylist())


def _sources(data) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["sources", "--root", str(data)])
    get_settings.cache_clear()
    return code, out.getvalue()


def test_the_newcomer_is_rejected_by_sources_and_the_sensor(built):
    from prx_data.definitions import build_defs

    data, paths, options = built
    assert b"50-good.yaml" in (try_read_bytes(locate(paths.spec_owner("good"), options)) or b"")
    defs = build_defs()
    with dg.instance_for_test() as instance:
        first = evaluate_sensor(defs, instance, SENSOR, None)
        _newcomer(data)
        code, out = _sources(data)
        assert code == 1
        (error,) = [line for line in out.splitlines() if line.startswith("ERROR")]
        assert "00-other.yaml" in error and "50-good.yaml" in error and "ignored" in error
        assert "good-photos" in out and "other-photos" not in out.replace(error, "")

        tick = evaluate_sensor(defs, instance, SENSOR, first.cursor)
        assert isinstance(tick, dg.SensorResult) and not tick.run_requests  # no re-ingest from the newcomer
        (evaluation,) = [e for e in tick.asset_events if isinstance(e, dg.AssetCheckEvaluation)]
        problems = evaluation.metadata["problems"]
        assert isinstance(problems, dg.TableMetadataValue)
        rows = [r.data for r in problems.records]
        assert [str(r["file"]).rsplit("/", 1)[-1] for r in rows] == ["00-other.yaml"]
        assert "50-good.yaml" in str(rows[0]["message"])
    assert _keys(paths, options) == {"g0.jpg", "g1.jpg"}


def test_a_table_without_an_owner_record_is_held_not_retired(built):
    """A table built before owners were recorded: neither claimant is taken, and the sensor
    neither re-ingests nor retires the source."""
    from prx_data.core.storage import locate as at
    from prx_data.definitions import build_defs

    data, paths, options = built
    loc = at(paths.spec_owner("good"), options)
    loc.fs.delete_file(loc.path)
    defs = build_defs()
    with dg.instance_for_test() as instance:
        first = evaluate_sensor(defs, instance, SENSOR, None)
        instance.add_dynamic_partitions("sources", ["good"])
        _newcomer(data)
        code, out = _sources(data)
        errors = [line for line in out.splitlines() if line.startswith("ERROR")]
        assert code == 1 and len(errors) == 2
        assert all("00-other.yaml" in e and "50-good.yaml" in e and "none is taken" in e for e in errors)
        tick = evaluate_sensor(defs, instance, SENSOR, first.cursor)
        requests = tick.run_requests if isinstance(tick, dg.SensorResult) else []
        assert not requests  # neither a re-ingest nor a retirement
        assert "good" in instance.get_dynamic_partitions("sources")
    assert _keys(paths, options) == {"g0.jpg", "g1.jpg"}


def test_prx_data_run_keeps_the_owner_rows(data_root, tmp_path, monkeypatch):
    """What a user meets: the next ``prx-data run`` after the newcomer appeared keeps the
    source's rows (on main it exited 0 with only the newcomer's folder left in the table)."""
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    _folder(data_root / "good-photos", ["g0", "g1"], seed=10)
    _folder(data_root / "other-photos", ["o0"], seed=50)
    (data_root / "sources" / "50-good.yaml").write_text("name: good\nshape: image_folder\nlocation: ../good-photos\n")

    def run() -> tuple[int, str]:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = main(["run", "--root", str(data_root)])
        get_settings.cache_clear()
        return code, out.getvalue()

    code, out = run()
    assert code == 0, out
    paths = StoragePaths.from_settings(get_settings())
    assert _keys(paths, None) == {"g0.jpg", "g1.jpg"}
    _newcomer(data_root, data_root / "other-photos")
    code, out = run()
    assert "00-other.yaml" in out and "already defined in" in out and "50-good.yaml" in out, out
    assert _keys(paths, None) == {"g0.jpg", "g1.jpg"}
