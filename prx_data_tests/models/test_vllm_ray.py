"""The vLLM-on-Ray captioner, as far as it goes without vLLM or a GPU.

What runs here: the preprocess (messages, image budget), the postprocess (guards), the engine
config, and building the real ``ray.data.llm`` processor and the lazy captioning dataset
against a local stand-in model directory. What cannot run here: the vLLM stages themselves.
"""

from __future__ import annotations

import base64
import io
import json

import pytest
from PIL import Image

from prx_data.core.reasons import reason_code as error_code
from prx_data.models.captioning.config import CaptionSampling, VLLMCaptionerConfig
from prx_data.models.captioning.factory import make_captioner
from prx_data.models.captioning.images import ImageBudget
from prx_data.models.captioning.prompt import SYSTEM_PROMPT, USER_PROMPT, caption_prompt_version
from prx_data.models.captioning.task import CaptionTask, FusedCaptionLabelTask, fused_label_version
from prx_data.models.captioning.vllm_ray import VLLMCaptioner, caption_engine_kwargs
from prx_data.models.inference.gpu_env import DEFAULT_REQUIREMENTS, WorkerEnv, gpu_runtime_env
from prx_data.models.inference.vllm_engine import PREP_ERROR, finalize, postprocess, preprocess, processor_config
from prx_data_tests.models.fake_openai import good_caption
from prx_data_tests.models.images import NOT_AN_IMAGE, image_bytes

BUDGET = ImageBudget(min_pixels=64 * 64, max_pixels=256 * 256)
SAMPLING = CaptionSampling(max_tokens=300)


TASK = CaptionTask("qwen3-vl-8b", sampling=SAMPLING, image=BUDGET)


def caption_preprocess(row, task=TASK):
    return preprocess(row, task=task)


def test_preprocess_builds_chat_messages_with_the_resized_image():
    row = {"sample_id": "s1", "image": image_bytes("red", (1200, 800), "JPEG"), "source": "x"}
    out = caption_preprocess(row)
    assert out["image"] is None  # the raw bytes do not travel through the GPU stages
    assert out[PREP_ERROR] is None
    system, user = out["messages"]
    # Every content is a list of parts, so the column keeps one Arrow type across rows.
    assert system == {"role": "system", "content": [{"type": "text", "text": SYSTEM_PROMPT}]}
    image_part, text_part = user["content"]
    assert text_part == {"type": "text", "text": USER_PROMPT}
    url = image_part["image_url"]["url"]
    assert url.startswith("data:image/jpeg;base64,")
    image = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))
    assert BUDGET.min_pixels <= image.width * image.height <= BUDGET.max_pixels
    assert image.width > image.height
    assert out["sampling_params"] == {"temperature": 0.7, "top_p": 0.8, "max_tokens": 300, "presence_penalty": 1.5, "top_k": 20}


def test_text_heavy_sources_get_the_larger_image_budget():
    cfg = VLLMCaptionerConfig(
        image=BUDGET, text_heavy_sources=("docs",), text_heavy_image=ImageBudget(min_pixels=64 * 64, max_pixels=512 * 512)
    )
    task = CaptionTask.from_config(cfg)
    big = image_bytes("red", (2000, 2000), "JPEG")

    def pixels(source):
        url = caption_preprocess({"sample_id": "s", "image": big, "source": source}, task)["messages"][1]["content"][0]["image_url"]["url"]
        image = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))
        return image.width * image.height

    assert pixels("web") <= BUDGET.max_pixels < pixels("docs") <= 512 * 512
    # The engine's processor budget is the widest one.
    assert caption_engine_kwargs(cfg)["mm_processor_kwargs"]["size"]["longest_edge"] == 512 * 512


def test_preprocess_of_a_bad_image_sends_a_one_token_placeholder():
    good = caption_preprocess({"sample_id": "s", "image": image_bytes()})
    out = caption_preprocess({"sample_id": "s", "image": NOT_AN_IMAGE})
    assert error_code(out[PREP_ERROR]) == "bad_image"
    assert out["sampling_params"]["max_tokens"] == 1
    # Same message shape and keys as a real request, so the Arrow column type holds across rows.
    assert [m["role"] for m in out["messages"]] == ["system", "user"]
    assert out["sampling_params"].keys() == good["sampling_params"].keys()


def post(**row):
    task = CaptionTask("qwen3-vl-8b", guards=VLLMCaptionerConfig().guards)
    return postprocess(row, task=task, max_tokens=300)


def test_postprocess_applies_the_guards():
    good = post(sample_id="a", generated_text=good_caption("red"), num_generated_tokens=160)
    assert good == {
        "sample_id": "a",
        "caption": good_caption("red"),
        "caption_model": "qwen3-vl-8b",
        "caption_prompt_version": caption_prompt_version(),
        "caption_error": None,
    }
    cut = post(sample_id="b", generated_text=good_caption("red"), num_generated_tokens=300)
    assert cut["caption"] is None and error_code(cut["caption_error"]) == "truncated"
    refused = post(sample_id="c", generated_text="I cannot help with that.", num_generated_tokens=7)
    assert error_code(refused["caption_error"]) == "refusal"
    bad = post(sample_id="d", generated_text="x", num_generated_tokens=1, prep_error="bad_image: x")
    assert bad["caption"] is None and bad["caption_error"] == "bad_image: x"


def test_finalize_gives_engine_failures_the_same_columns():
    failed = {"sample_id": "e", "messages": [], "__inference_error__": "CUDA error: boom"}
    out = finalize(failed, task=TASK)
    assert out["caption"] is None and out["caption_error"] == "inference_error: CUDA error: boom"
    ok = {**post(sample_id="a", generated_text=good_caption(), num_generated_tokens=9), "__inference_error__": ""}
    assert finalize(ok, task=TASK) == post(sample_id="a", generated_text=good_caption(), num_generated_tokens=9)


def test_fused_task_reads_caption_and_label_from_one_json_answer():
    import json

    task = FusedCaptionLabelTask("qwen3-vl-8b")
    req = caption_preprocess({"sample_id": "s", "image": image_bytes()}, task)
    assert json.loads(req["sampling_params"]["structured_outputs"]["json"])["required"] == ["caption", "label"]
    assert "visual" in req["messages"][0]["content"][0]["text"]

    def answer(text, n=160):
        return postprocess({"sample_id": "a", "generated_text": text, "num_generated_tokens": n}, task=task, max_tokens=512)

    ok = answer(json.dumps({"caption": good_caption("red"), "label": "text"}))
    assert ok["caption"] == good_caption("red") and ok["label"] == "text"
    assert ok["label_version"] == fused_label_version() and ok["label_model"] == "qwen3-vl-8b"
    short = answer(json.dumps({"caption": "A cat.", "label": "visual"}))
    assert error_code(short["caption_error"]) == "too_short" and short["label"] is None
    assert error_code(answer('{"caption": "A cat')["caption_error"]) == "bad_response"
    assert error_code(answer('{"caption": "A cat', n=512)["caption_error"]) == "truncated"


def test_engine_config_carries_the_settings_and_the_gpu_worker_env(monkeypatch):
    monkeypatch.delenv("HF_HOME", raising=False)
    cfg = VLLMCaptionerConfig(
        replicas=2,
        batch_size=16,
        max_num_seqs=64,
        max_model_len=4096,
        gpu_memory_utilization=0.85,
        accelerator_type="H200",
        worker_env=WorkerEnv(mode="pip"),
    )
    pc = processor_config(cfg, engine=caption_engine_kwargs(cfg), multimodal=True)
    assert pc.model_source == "Qwen/Qwen3-VL-8B-Instruct"
    assert pc.concurrency == 2 and pc.batch_size == 16 and pc.accelerator_type == "H200"
    kw = pc.engine_kwargs
    assert kw["max_model_len"] == 4096 and kw["max_num_seqs"] == 64
    assert kw["gpu_memory_utilization"] == 0.85 and kw["enable_prefix_caching"] is True
    assert kw["limit_mm_per_prompt"] == {"image": 1, "video": 0}
    # The H200 profile: FP8 weights and KV cache, 16k tokens per step, an image-token budget.
    assert kw["quantization"] == "fp8" and kw["kv_cache_dtype"] == "fp8"
    assert kw["max_num_batched_tokens"] == 16384
    assert kw["mm_processor_kwargs"]["size"]["longest_edge"] == cfg.image.max_pixels
    assert pc.prepare_multimodal_stage["enabled"] is True
    assert pc.detokenize_stage == {"enabled": False}
    assert pc.should_continue_on_error is True
    env = pc.runtime_env
    packages = env["pip"]["packages"]
    # Ray 2.60's pins: vLLM 0.29 (chat_utils still there) and Ray Serve (the metrics logger).
    assert "vllm==0.29.0" in packages and "ray[data,serve]==2.60.0" in packages
    assert any(p.startswith("pylance") for p in packages)
    assert not any(p.startswith("mosaicml-streaming") for p in packages)
    assert env["env_vars"]["HF_HUB_OFFLINE"] == "1"


def test_worker_env_modes(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # the driver's value wins over the default
    # The default is the baked worker image: no per-node install.
    assert WorkerEnv().mode == "none"
    assert gpu_runtime_env(WorkerEnv())["env_vars"]["HF_HUB_OFFLINE"] == "0"
    assert "pip" not in gpu_runtime_env(WorkerEnv())
    assert gpu_runtime_env(WorkerEnv(mode="python", python="/opt/gpu-env/bin/python"))["py_executable"] == "/opt/gpu-env/bin/python"
    with pytest.raises(ValueError):
        gpu_runtime_env(WorkerEnv(mode="python"))
    image = gpu_runtime_env(WorkerEnv(mode="image", image_uri="registry/prx-gpu:1"))
    assert image["image_uri"] == "registry/prx-gpu:1"
    with pytest.raises(ValueError):
        gpu_runtime_env(WorkerEnv(mode="image"))
    with pytest.raises(FileNotFoundError, match="requirements"):
        gpu_runtime_env(WorkerEnv(mode="pip", requirements_path="/nonexistent/req.txt"))
    assert DEFAULT_REQUIREMENTS.is_file()


@pytest.fixture
def fake_model_dir(tmp_path):
    """Stands in for a local Qwen3-VL checkpoint: building the processor only reads config.json."""
    (tmp_path / "config.json").write_text(json.dumps({"architectures": ["Qwen3VLForConditionalGeneration"], "model_type": "qwen3_vl"}))
    return tmp_path


def test_builds_the_ray_data_llm_processor_and_the_lazy_dataset(ray_local, fake_model_dir):
    cfg = VLLMCaptionerConfig(model_source=str(fake_model_dir), image=BUDGET)
    captioner = make_captioner(cfg)
    assert isinstance(captioner, VLLMCaptioner)
    assert captioner.model_id == "Qwen/Qwen3-VL-8B-Instruct"  # the path is not the model name
    ds = ray_local.data.from_items([{"sample_id": "a", "image": image_bytes()}])
    out = captioner.run_dataset(ds)  # lazy: nothing runs, so no vLLM is needed
    plan = str(out)
    for stage in ("_preprocess", "PrepareMultimodalUDF", "ChatTemplateUDF", "TokenizeUDF", "vLLMEngineStageUDF", "_postprocess"):
        assert stage in plan, plan
    assert "DetokenizeUDF" not in plan


def test_rows_survive_ray_data_around_a_stand_in_engine(ray_local):
    """Our pre/postprocess run in real Ray Data maps, wrapped the way the processor wraps them
    (Ray's own wrap_preprocess/wrap_postprocess), with a stand-in for the vLLM stages: mixed
    rows (good, bad image, engine failure) come out with one schema."""
    import functools

    from ray.llm._internal.batch.stages.base import wrap_postprocess, wrap_preprocess

    cfg = VLLMCaptionerConfig(image=BUDGET)
    task = CaptionTask("m", image=cfg.image, sampling=cfg.sampling, guards=cfg.guards)
    data = "__data"

    def engine(row):
        d = dict(row[data])
        if d["sample_id"] == "boom":
            return {data: {**d, "__inference_error__": "CUDA error"}}
        assert d["image"] is None  # the raw bytes were dropped before the GPU stages
        n = d["sampling_params"]["max_tokens"]
        return {data: {**d, "generated_text": good_caption("red"), "num_generated_tokens": min(n, 160), "__inference_error__": ""}}

    rows = [
        {"sample_id": "a", "image": image_bytes("red", (300, 200))},
        {"sample_id": "bad", "image": NOT_AN_IMAGE},
        {"sample_id": "boom", "image": image_bytes()},
    ]
    ds = (
        ray_local.data.from_items(rows)
        .map(wrap_preprocess(functools.partial(preprocess, task=task), data))
        .map(engine)
        .map(wrap_postprocess(functools.partial(postprocess, task=task, max_tokens=300), data, include_error_column=True))
        .map(functools.partial(finalize, task=task))
    )
    out = {r["sample_id"]: r for r in ds.take_all()}
    assert out["a"]["caption"] == good_caption("red") and out["a"]["caption_error"] is None
    assert error_code(out["bad"]["caption_error"]) == "bad_image"
    assert out["boom"]["caption_error"] == "inference_error: CUDA error"
    assert {tuple(sorted(r)) for r in out.values()} == {
        ("caption", "caption_error", "caption_model", "caption_prompt_version", "sample_id")
    }
