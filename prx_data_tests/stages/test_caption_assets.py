"""captions and caption_labels through Dagster on LocalRay: the CPU defaults, a switch to a
VLM served over the OpenAI protocol that recaptions only stale rows and invalidates labels,
and a dead server that fails the run while keeping finished batches."""

from __future__ import annotations

import json

import dagster as dg
import lance
import pytest

from prx_data.core.paths import StoragePaths
from prx_data.core.schema import LABELS
from prx_data.core.settings import get_settings
from prx_data.definitions import build_defs
from prx_data.demo.corpus import build_demo_corpus
from prx_data.models.captioning.prompt import caption_prompt_version
from prx_data_tests.conftest import materializations, run_source
from prx_data_tests.models.fake_openai import FakeChatServer

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
RAW, CAP, LAB = dg.AssetKey("raw_samples"), dg.AssetKey("captions"), dg.AssetKey("caption_labels")


def _meta(result, asset):
    (mat,) = materializations(result, asset)
    return {k: v.value for k, v in mat.metadata.items()}


def _rows(source):
    ds = lance.dataset(StoragePaths.from_settings(get_settings()).raw_table(source))
    wanted = ["source_key", "source_caption", "caption", "caption_model", "caption_prompt_version", "caption_error", "label", "label_model"]
    rows = ds.to_table(columns=[c for c in wanted if c in ds.schema.names], filter="status = 'ok'").to_pylist()
    return [{c: r.get(c) for c in wanted} for r in rows]


def _reload(monkeypatch, captioner: dict):
    monkeypatch.setenv("PRX_CAPTIONER", json.dumps(captioner))
    get_settings.cache_clear()
    return build_defs()


def test_captions_then_labels_then_a_vlm_switch(data_root, prx_defs, instance, monkeypatch):
    build_demo_corpus(data_root)
    result = run_source(prx_defs, instance, "web", selection=[RAW, CAP, LAB])
    assert result.success
    rows = _rows("web")
    with_source = [r for r in rows if r["source_caption"]]
    assert all(r["caption"] == r["source_caption"] and r["caption_model"] == "source" for r in with_source)
    assert all(r["caption_error"] == "no_source_caption" for r in rows if not r["source_caption"])
    assert {r["label"] for r in with_source} <= set(LABELS) and all(r["label"] for r in with_source)
    cap_meta = _meta(result, "captions")
    assert cap_meta["captioned"] == len(with_source) and cap_meta["caption_model"] == "source"
    assert _meta(result, "caption_labels")["labelled"] == len(with_source)
    assert cap_meta["failed"] == len(rows) - len(with_source) > 0

    # Nothing changed: a row without a source caption gets the same verdict, so none is redone.
    same = run_source(prx_defs, instance, "web", selection=[CAP])
    assert same.success
    rerun = _meta(same, "captions")
    assert rerun["captioned"] == rerun["failed"] == 0 and rerun["skipped_current"] == len(rows), rerun

    with FakeChatServer() as server:
        defs = _reload(
            monkeypatch,
            {"backend": "openai", "server": {"base_url": server.base_url, "model": "fake-vl", "max_retries": 1, "backoff_initial_s": 0.01}},
        )
        again = run_source(defs, instance, "web", selection=[CAP])
        assert again.success
        meta = _meta(again, "captions")
        # Every row was made by another model: all are recaptioned, once each.
        assert meta["captioned"] + meta["failed"] == len(rows)
        assert len(server.requests) == len(rows)
        after = _rows("web")
        good = [r for r in after if r["caption"]]
        assert good and all(r["caption_model"] == "fake-vl" and r["caption_prompt_version"] == caption_prompt_version() for r in good)
        assert all(len(r["caption"].split()) >= 40 for r in good)
        # New captions invalidate the labels made from the old ones.
        assert all(r["label"] is None for r in after)

        # Nothing stale now: a re-run sends no request.
        before = len(server.requests)
        third = run_source(defs, instance, "web", selection=[CAP])
        assert _meta(third, "captions")["skipped_current"] == len(good)
        assert len(server.requests) - before == len(after) - len(good)


def test_dead_backend_fails_the_run_with_a_clear_message(data_root, prx_defs, instance, monkeypatch):
    build_demo_corpus(data_root)
    assert run_source(prx_defs, instance, "shards", selection=[RAW]).success
    defs = _reload(
        monkeypatch,
        {
            "backend": "openai",
            "server": {"base_url": "http://127.0.0.1:9/v1", "model": "m", "max_retries": 1, "backoff_initial_s": 0.01, "timeout_s": 1},
        },
    )
    result = run_source(defs, instance, "shards", selection=[CAP])
    assert not result.success
    failure = next(e for e in result.all_events if e.is_step_failure)
    error, message = failure.event_specific_data.error, ""
    while error is not None:  # the retry policy wraps the step's own error
        message += error.message
        error = error.cause or error.context
    assert "captioner backend 'openai' is unavailable" in message and "127.0.0.1:9" in message
    # The table is intact and nothing was half-written.
    assert all(r["caption"] is None for r in _rows("shards"))
