"""The model stage's lifecycle and its one backend factory, on the real stages and backends: a
backend is set up once per worker and closed when its stage run ends here, when a newer config
displaces it, and never left open by a run that failed; a backend that needs no model never goes
to Ray; a factory builds only backends of its own package; a third stage is a declaration and a
backend (docs/architecture.md, "Model stages")."""

from __future__ import annotations

import functools
import hashlib
import io
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import lance
import pyarrow as pa
import pytest

from prx_data.core.schema import raw_schema
from prx_data.models.captioning.factory import CAPTIONERS
from prx_data.models.captioning.openai_backend import OpenAICaptioner
from prx_data.models.inference.backend import BackendUnavailable, ModelBackend, ModelResult
from prx_data.models.inference.columns import DerivedColumns, results_table
from prx_data.models.inference.factory import BackendConfig, BackendFactory
from prx_data.models.labeling.factory import CLASSIFIERS
from prx_data.stages.caption_stage import CAPTIONS
from prx_data.stages.column_spec import ColumnStage
from prx_data.stages.label_stage import CAPTION_LABELS
from prx_data.stages.model_stage import WORKER_BACKENDS, ModelStage, Reads, WorkerBackends
from prx_data_tests.images import jpeg
from prx_data_tests.models.fake_openai import FakeChatServer

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _table(uri: str, n: int, caption: str | None = None) -> list[str]:
    schema = pa.schema([*raw_schema(), pa.field("caption", pa.string())])
    rows: list[dict[str, Any]] = []
    for i in range(n):
        data = jpeg(64, 48, seed=i)
        rows.append(
            {
                "sample_id": f"s{i}",
                "source": "src",
                "source_key": f"k{i}",
                "image": data,
                "image_format": "JPEG",
                "image_sha256": hashlib.sha256(data).hexdigest(),
                "width": 64,
                "height": 48,
                "status": "ok",
                "ingested_at": datetime.now(UTC),
                "caption": caption,
            }
        )
    lance.write_dataset(pa.Table.from_pylist(rows, schema=schema), uri, schema=schema)
    return [r["sample_id"] for r in rows]


def _openai(url: str, model: str = "fake-vl") -> dict:
    return {"backend": "openai", "server": {"base_url": url, "model": model, "max_retries": 1, "backoff_initial_s": 0.01, "timeout_s": 5}}


def test_a_local_run_sets_its_backend_up_once_and_closes_it_when_it_ends(tmp_path):
    uri = str(tmp_path / "t.lance")
    ids = _table(uri, 5)
    seen: list[tuple[ModelBackend, bool]] = []

    def progress(done: int, total: int) -> None:
        # Between chunks: the backend this process set up, holding its HTTP client.
        (backend,) = WORKER_BACKENDS.held(CAPTIONS)
        assert isinstance(backend, OpenAICaptioner)
        seen.append((backend, backend._http is not None))

    with FakeChatServer() as server:
        stats = CAPTIONS.compute(uri, _openai(server.base_url), executor="local", chunk_rows=2, progress=progress)
    assert stats.processed == len(ids) and len(server.requests) == len(ids)
    # Three chunks, one backend: set up once, its client open while the run lasted.
    assert len(seen) == 3 and len({id(b) for b, _ in seen}) == 1 and all(open_ for _, open_ in seen)
    # The run is over: released here, its client closed.
    first_backend = seen[0][0]
    assert isinstance(first_backend, OpenAICaptioner)
    assert WORKER_BACKENDS.held(CAPTIONS) == [] and first_backend._http is None
    table = lance.dataset(uri).to_table(columns=["caption_model", "caption_error"]).to_pylist()
    assert all(r["caption_model"] == "fake-vl" and r["caption_error"] is None for r in table)


def test_a_failed_run_closes_its_backend_too(tmp_path):
    uri = str(tmp_path / "t.lance")
    _table(uri, 2)
    down = {"backend": "openai", "server": {"base_url": "http://127.0.0.1:9/v1", "model": "m", "max_retries": 0, "timeout_s": 1}}
    with pytest.raises(BackendUnavailable):
        CAPTIONS.compute(uri, down, executor="local")
    assert WORKER_BACKENDS.held(CAPTIONS) == []


def test_a_worker_keeps_two_configs_per_stage_and_closes_the_one_displaced():
    backends = WorkerBackends()
    with FakeChatServer() as server:
        configs = [CAPTIONS.parse(_openai(server.base_url, model)).model_dump_json() for model in ("a", "b", "c")]
        first = backends.get(CAPTIONS, configs[0])
        assert isinstance(first, OpenAICaptioner) and first.caption_images([jpeg(32, 32)])[0].ok
        assert first._http is not None
        assert backends.get(CAPTIONS, configs[0]) is first  # set up once
        second = backends.get(CAPTIONS, configs[1])
        backends.get(CAPTION_LABELS, CAPTION_LABELS.parse({"backend": "fused"}).model_dump_json())  # another stage's
        third = backends.get(CAPTIONS, configs[2])
        # The least recently used caption backend was torn down (its client closed); the
        # label stage's own is not counted against the caption stage's two.
        assert isinstance(first, OpenAICaptioner) and first._http is None
        assert backends.held(CAPTIONS) == [second, third] and len(backends.held(CAPTION_LABELS)) == 1
        backends.release_all()
        assert backends.held(CAPTIONS) == backends.held(CAPTION_LABELS) == []


def test_a_backend_outlives_a_run_while_another_run_of_it_lasts_here():
    backends = WorkerBackends()
    config = CAPTION_LABELS.parse({"backend": "fused"}).model_dump_json()
    with backends.run_here(CAPTION_LABELS, config):
        with backends.run_here(CAPTION_LABELS, config):
            backend = backends.get(CAPTION_LABELS, config)
        assert backends.held(CAPTION_LABELS) == [backend]
    assert backends.held(CAPTION_LABELS) == []


def test_the_fused_classifier_marks_rows_without_a_model_and_without_ray(tmp_path):
    """No model to run: the rows are marked in this process whatever the executor (a Ray task
    would set its backend up in a worker, not here)."""
    uri = str(tmp_path / "t.lance")
    ids = _table(uri, 3, caption="A red square.")
    here: list[int] = []
    stats = CAPTION_LABELS.compute(
        uri, {"backend": "fused"}, executor="ray", progress=lambda done, total: here.append(len(WORKER_BACKENDS.held(CAPTION_LABELS)))
    )
    assert stats.processed == stats.failed == len(ids) and here and all(n == 1 for n in here)
    rows = lance.dataset(uri).to_table(columns=["label", "label_model", "label_version", "label_error"]).to_pylist()
    assert {r["label_error"] for r in rows} == {"no_fused_label"} and all(r["label"] is None for r in rows)
    assert {(r["label_model"], r["label_version"]) for r in rows} == {CAPTION_LABELS.identity(CAPTION_LABELS.parse({"backend": "fused"}))}


@pytest.mark.parametrize("factory", [CAPTIONERS, CLASSIFIERS], ids=lambda f: f.kind)
def test_every_registered_config_builds_a_backend_of_its_own_package(factory):
    for config_type in factory.config_types:
        try:
            backend_class = factory.backend_class(config_type)
        except TypeError as refused:  # a config that names no backend says why
            assert "runs no model" in str(refused)
            continue
        assert issubclass(backend_class, ModelBackend)
        assert backend_class.__module__.startswith(factory.package + ".")


def test_a_factory_refuses_targets_outside_its_package():
    with pytest.raises(ValueError, match="relative"):
        BackendFactory("captioner", dict, "prx_data.models.captioning", {dict: "prx_data.models.labeling.minilm:MiniLMClassifier"})
    with pytest.raises(ValueError, match="relative"):
        BackendFactory("captioner", dict, "prx_data.models.captioning", {dict: "..labeling.minilm:MiniLMClassifier"})


# A third model stage, as docs/architecture.md sketches it: a backend and a declaration.
class MeanColourConfig(BackendConfig):
    backend: Literal["mean"] = "mean"
    model_id: str = "mean-rgb"


@dataclass(frozen=True)
class EmbeddingResult(ModelResult):
    value_field = "embedding"
    embedding: list[float] | None = None


class MeanColour(ModelBackend[EmbeddingResult]):
    version = "mean-v1"

    def __init__(self, config: MeanColourConfig) -> None:
        self.config, self.model_id = config, config.model_id

    def run_batch(self, rows):
        from PIL import Image, ImageStat

        return [
            EmbeddingResult([v / 255 for v in ImageStat.Stat(Image.open(io.BytesIO(row["image"])).convert("RGB")).mean]) for row in rows
        ]


EMBEDDING = DerivedColumns("embedding", "embedding_model", "embedding_version", "embedding_error")
EMBEDDING_COLUMNS = pa.schema([pa.field("embedding", pa.list_(pa.float32())), *(pa.field(name, pa.string()) for name in EMBEDDING[1:])])


class EmbeddingStage(ModelStage[MeanColourConfig, MeanColour]):
    columns = EMBEDDING
    backends = BackendFactory("embedder", MeanColourConfig, __package__, {MeanColourConfig: ".test_model_stage:MeanColour"})
    identity = staticmethod(lambda config: (config.model_id, MeanColour.version))
    results_table = staticmethod(
        functools.partial(results_table, EMBEDDING, pa.schema([pa.field("sample_id", pa.string()), *EMBEDDING_COLUMNS]))
    )

    def reads(self, config):
        return Reads(images=True)

    def column_stage(self, config):
        model, version = self.identity(config)
        return ColumnStage(
            name=self.name,
            columns=EMBEDDING_COLUMNS,
            current={EMBEDDING.model: model, EMBEDDING.version: version},
            redo_if_set=(EMBEDDING.error,),
            inputs=("image_sha256",),
        )


def test_a_third_stage_is_a_declaration_and_a_backend(tmp_path):
    uri = str(tmp_path / "t.lance")
    ids = _table(uri, 4)
    stage = EmbeddingStage()
    first = stage.compute(uri, {"backend": "mean"}, executor="local", run_id="run-1")
    assert first.processed == len(ids) and first.extra == {**first.extra, "embedding_model": "mean-rgb", "embedding_version": "mean-v1"}
    rows = lance.dataset(uri).to_table(columns=["sample_id", "embedding", "embedding_model", "embedding_run_id"]).to_pylist()
    assert all(len(r["embedding"]) == 3 and 0 <= min(r["embedding"]) and r["embedding_model"] == "mean-rgb" for r in rows)
    assert {r["embedding_run_id"] for r in rows} == {"run-1"}
    # Resumable like every column stage: nothing is stale, nothing is redone.
    assert stage.compute(uri, {"backend": "mean"}, executor="local").processed == 0
    assert WORKER_BACKENDS.held(stage) == []
