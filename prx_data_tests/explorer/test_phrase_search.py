"""A quoted (phrase) search in the explorer over a table the product itself indexed: ingest, then
the ``table_maintenance`` asset through Dagster, then the HTTP route; local and s3:// roots.

The index is the one ``curation/maintenance.py`` builds (with token positions). A table whose
full-text index was built without positions answers 500 on every phrase query until the next
maintenance run rebuilds it: that upgrade is tested here too. The explorer's own test corpus is
indexed by the same function (``prx_data_tests/explorer/corpus.py``)."""

from __future__ import annotations

import os
import warnings

import dagster as dg
import lance
import pytest

from prx_data.explorer.search import full_text_table
from prx_data_tests import images
from prx_data_tests.conftest import materializations, pin_fixture_publication
from prx_data_tests.explorer.helpers import card_ids

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

CAPTIONS = {
    "a": "a red square on a white wall",
    "b": "a square that is red",
    "c": "red square logo on a shirt",
    "d": "nothing here but a square and something red",
}
PHRASE = '"red square"'


@pytest.fixture
def product_root(storage_root, tmp_path, monkeypatch):
    """Specs in a local folder, the Lance and MDS roots on ``storage_root``."""
    from prx_data.core.settings import get_settings

    for name in list(os.environ):
        if name.startswith(("PRX_", "AWS_")) and name != "PRX_RAY_ADDRESS":
            monkeypatch.delenv(name)
    data = tmp_path / "data"
    folder = tmp_path / "photos"
    folder.mkdir()
    for i, (key, caption) in enumerate(CAPTIONS.items()):
        (folder / f"{key}.jpg").write_bytes(images.jpeg(640, 480, seed=i))
        (folder / f"{key}.txt").write_text(caption)
    (data / "sources").mkdir(parents=True)
    (data / "optout").mkdir()
    (data / "sources" / "photos.yaml").write_text(f"name: photos\nshape: image_folder\nlocation: {folder}\n")
    env = {"PRX_DATA_ROOT": str(data), "PRX_LANCE_ROOT": storage_root.uri("lance"), "PRX_MDS_ROOT": storage_root.uri("mds")}
    if storage_root.server is not None:
        env = storage_root.server.env(**env)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    pin_fixture_publication(monkeypatch)
    get_settings.cache_clear()
    yield get_settings()
    get_settings.cache_clear()


def _ingest(settings) -> str:
    from prx_data.core.paths import StoragePaths
    from prx_data.ingest.driver import ingest_source
    from prx_data.ingest.registry import load_registry
    from prx_data.stages.caption_stage import compute_captions

    uri = StoragePaths.from_settings(settings).raw_table("photos")
    ingest_source(load_registry(settings.sources_dir).get("photos"), uri, storage_options=settings.storage_options)
    compute_captions(uri, {"backend": "source"}, executor="local", storage_options=settings.storage_options)
    return uri


def _maintain(instance) -> dict:
    from prx_data.definitions import build_defs

    result = (
        build_defs()
        .resolve_job_def("corpus")
        .execute_in_process(instance=instance, asset_selection=[dg.AssetKey("table_maintenance")], raise_on_error=False)
    )
    assert result.success
    (maint,) = materializations(result, "table_maintenance")
    return maint.metadata["per_table"].value


def _get(settings, query: str):
    from prx_data.explorer.app import build_app

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*httpx2.*")
        from starlette.testclient import TestClient

    with TestClient(build_app(settings), raise_server_exceptions=False) as client:
        return client.get("/", params={"q": query, "source": "photos"})


def _ids(uri: str, options, keys) -> set[str]:
    table = lance.dataset(uri, storage_options=options).to_table(columns=["sample_id", "source_key"])
    by_key = {k.removesuffix(".jpg"): s for k, s in zip(table["source_key"].to_pylist(), table["sample_id"].to_pylist())}
    return {by_key[k] for k in keys}


def test_phrase_search_over_the_index_maintenance_builds(product_root, instance):
    settings = product_root
    uri = _ingest(settings)
    per_table = _maintain(instance)
    (indexes,) = [v["indexes"] for k, v in per_table.items() if k.endswith("sources/photos.lance")]
    assert indexes["caption:INVERTED"] == "created" and indexes["source_caption:INVERTED"] == "created"

    page = _get(settings, PHRASE)
    assert page.status_code == 200, page.text[-2000:]
    assert card_ids(page.text) == _ids(uri, settings.storage_options, "ac")
    assert "full-text index (BM25)" in page.text
    # Words (no quotes) still match every caption holding both.
    assert card_ids(_get(settings, "red square").text) == _ids(uri, settings.storage_options, "abcd")
    # Both indexed columns answer one phrase query each (Lance refuses a phrase over several).
    ds = lance.dataset(uri, storage_options=settings.storage_options)
    got = full_text_table(ds, {"sample_id": "sample_id"}, PHRASE, ["caption", "source_caption"], None, 100)
    assert sorted(got["sample_id"].to_pylist()) == sorted(_ids(uri, settings.storage_options, "ac"))


def test_an_index_without_positions_is_rebuilt_by_the_next_maintenance_run(product_root, instance):
    settings = product_root
    uri = _ingest(settings)
    ds = lance.dataset(uri, storage_options=settings.storage_options)
    for column in ("caption", "source_caption"):
        ds.create_scalar_index(column, "INVERTED")  # how tables were indexed before: no positions
    broken = _get(settings, PHRASE)
    assert broken.status_code == 500  # the symptom users met

    per_table = _maintain(instance)
    (indexes,) = [v["indexes"] for k, v in per_table.items() if k.endswith("sources/photos.lance")]
    assert indexes["caption:INVERTED"] == "rebuilt: positions added"
    assert indexes["source_caption:INVERTED"] == "rebuilt: positions added"
    page = _get(settings, PHRASE)
    assert page.status_code == 200, page.text[-2000:]
    assert card_ids(page.text) == _ids(uri, settings.storage_options, "ac")
    # The next run finds positions and only brings the index up to date.
    again = _maintain(instance)
    (indexes,) = [v["indexes"] for k, v in again.items() if k.endswith("sources/photos.lance")]
    assert indexes["caption:INVERTED"] == "updated"
