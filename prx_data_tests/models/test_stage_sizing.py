"""The default H200 profile as Ray Data's processor config: CPU stages sized so the image work
gets the cores, no multimodal processor cache for unique images, and the bf16-vision option.
Builds configs only (no engine, no Ray start)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from prx_data.models.captioning.config import VLLMCaptionerConfig
from prx_data.models.captioning.fp8_vision import ONLINE_FP8, VISION_TOWER_IGNORE
from prx_data.models.captioning.vllm_ray import caption_engine_kwargs
from prx_data.models.inference.vllm_engine import engine_kwargs, processor_config
from prx_data.models.labeling.config import VLLMClassifierConfig
from prx_data.models.labeling.task import NO_THINKING

REPO = Path(__file__).resolve().parents[2]
NODE_CPUS = 16  # one H200 node of the reference cluster


def resolved(pc, name: str):
    """The stage as Ray 2.60 resolves it (its stage configs refuse unknown fields)."""
    from ray.llm._internal.batch.stages import configs

    cls: Any = {
        "prepare_multimodal_stage": configs.PrepareMultimodalStageConfig,
        "chat_template_stage": configs.ChatTemplateStageConfig,
        "tokenize_stage": configs.TokenizerStageConfig,
    }[name]
    return configs.resolve_stage_config(getattr(pc, name), cls, {"concurrency": pc.concurrency})


def max_cpus(stage) -> float:
    top = stage.concurrency[1] if isinstance(stage.concurrency, tuple) else stage.concurrency
    return top * stage.num_cpus


def test_default_caption_profile_gives_the_cores_to_the_image_stages():
    cfg = VLLMCaptionerConfig()
    pc = processor_config(cfg, engine=caption_engine_kwargs(cfg), multimodal=True)
    prepare, chat, tok = (resolved(pc, n) for n in ("prepare_multimodal_stage", "chat_template_stage", "tokenize_stage"))
    assert prepare.enabled and prepare.num_cpus == 1.0 and prepare.concurrency == (1, 4)
    for text_stage in (chat, tok):
        assert text_stage.enabled and text_stage.num_cpus == 0.25 and text_stage.concurrency == (1, 2)
    # At most one core of the node for text work; the image stages and our preprocess
    # (decode + resize + encode) keep the rest besides the engine.
    assert max_cpus(chat) + max_cpus(tok) <= 1.0
    assert max_cpus(prepare) + max_cpus(chat) + max_cpus(tok) <= NODE_CPUS / 2
    kw = pc.engine_kwargs
    assert kw["mm_processor_cache_gb"] == 0  # unique images: the cache never hits
    assert kw["quantization"] == "fp8" and "quantization_config" not in kw  # the tower is FP8 too by default
    assert pc.detokenize_stage == {"enabled": False}


def test_default_label_profile_sizes_the_text_stages_the_same():
    cfg = VLLMClassifierConfig()
    pc = processor_config(cfg, engine=engine_kwargs(cfg), multimodal=False, chat_template_kwargs=NO_THINKING)
    chat, tok = resolved(pc, "chat_template_stage"), resolved(pc, "tokenize_stage")
    assert chat.num_cpus == tok.num_cpus == 0.25 and chat.concurrency == tok.concurrency == (1, 2)
    assert chat.chat_template_kwargs == NO_THINKING
    assert resolved(pc, "prepare_multimodal_stage").enabled is False
    assert "mm_processor_cache_gb" not in pc.engine_kwargs


def test_vision_bf16_quantizes_the_language_model_only():
    cfg = VLLMCaptionerConfig(vision_bf16=True)
    kw = processor_config(cfg, engine=caption_engine_kwargs(cfg), multimodal=True).engine_kwargs
    assert kw["quantization"] == ONLINE_FP8 and kw["kv_cache_dtype"] == "fp8"
    assert kw["quantization_config"] == {"ignore": [VISION_TOWER_IGNORE]}
    pattern = VISION_TOWER_IGNORE.removeprefix("re:")
    # Module names of vLLM 0.29's Qwen3-VL (vllm/model_executor/models/qwen3_vl.py).
    for name in (
        "visual.blocks.0.attn.qkv",
        "visual.blocks.26.mlp.linear_fc2",
        "visual.merger.linear_fc1",
        "visual.deepstack_merger_list.2.linear_fc2",
        "model.visual.blocks.3.attn.proj",
    ):
        assert re.match(pattern, name), name
    for name in (
        "language_model.model.layers.0.self_attn.qkv_proj",
        "language_model.model.layers.35.mlp.down_proj",
        "language_model.lm_head",
    ):
        assert not re.match(pattern, name), name
    # Without FP8 the option changes nothing (the CPU profile, a pre-quantized checkpoint).
    plain = VLLMCaptionerConfig(vision_bf16=True, quantization=None)
    assert "quantization_config" not in caption_engine_kwargs(plain)


VLLM_CHECK = """
import json, sys, tempfile
from vllm.config.quantization import resolve_quantization_config
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.model_executor.layers.quantization.online.base import OnlineQuantizationConfig
from vllm.model_executor.models.qwen3_vl import Qwen3VLForConditionalGeneration as M
kw = json.loads(sys.argv[1])
AsyncEngineArgs(model=tempfile.mkdtemp(), **kw)  # every engine argument is one vLLM knows (a local dir: no hub)
args = resolve_quantization_config(kw["quantization"], kw["quantization_config"])
q = OnlineQuantizationConfig(args)
q.packed_modules_mapping = M.packed_modules_mapping
from vllm.model_executor.layers.quantization.compressed_tensors.utils import should_ignore_layer
names = ["visual.blocks.0.attn.qkv", "visual.merger.linear_fc1", "language_model.model.layers.0.self_attn.qkv_proj",
         "language_model.model.layers.0.mlp.gate_up_proj"]
print(json.dumps({n: should_ignore_layer(n, ignore=q.ignored_layers, fused_mapping=q.packed_modules_mapping) for n in names}))
"""


def test_vision_bf16_engine_arguments_are_what_vllm_0_29_accepts():
    python = os.environ.get("PRX_VLLM_CPU_PYTHON")
    if not python or not Path(python).is_file():
        pytest.skip("needs the CPU vLLM environment (PRX_VLLM_CPU_PYTHON, scripts/vllm_cpu_env.sh)")
    cfg = VLLMCaptionerConfig(vision_bf16=True)
    kw = caption_engine_kwargs(cfg)
    proc = subprocess.run(
        [python, "-c", VLLM_CHECK, json.dumps(kw)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)},
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    ignored = json.loads(proc.stdout.strip().splitlines()[-1])
    assert ignored == {
        "visual.blocks.0.attn.qkv": True,
        "visual.merger.linear_fc1": True,
        "language_model.model.layers.0.self_attn.qkv_proj": False,
        "language_model.model.layers.0.mlp.gate_up_proj": False,
    }
