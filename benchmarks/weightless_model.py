"""Model folders without weights, for vLLM's ``load_format="dummy"``: the published Qwen3-VL-8B /
Qwen3-8B configuration (benchmarks/qwen_configs.py) with a tokenizer of the real size.

vLLM fills dummy weights at load time (FP8 quantized on the fly when asked), so the engine
runs the real architecture's kernels at the real shapes: with the output length forced
(``ignore_eos``) its rate is the real decoding cost. Nothing comes from a model hub: the
tokenizer is a byte-level BPE trained here on the pipeline's prompts and synthetic captions,
padded with never-produced tokens to Qwen's 151643 ordinary ids, then Qwen's special tokens at
their real ids (so ``<|image_pad|>`` is 151655, ``<|im_end|>`` 151645 ...), 151936 embeddings.
Its text compresses less well than Qwen's 151k merges: the benchmarks print the prompt lengths
vLLM saw next to the published tokenizer's typical rate.

Run in the vLLM environment (transformers 5):
``python benchmarks/weightless_model.py OUT --scale real|tiny`` writes OUT/qwen3-vl, OUT/qwen3.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from qwen_configs import ORDINARY_TOKENS, SPECIAL_TOKEN_IDS, Scale, text_dims, vision_dims  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BPE_MERGES_VOCAB = 2000  # trained vocabulary before padding: ~3.5 chars/token on the prompts


def _corpus() -> list[str]:
    """The pipeline's own prompts plus caption-like prose (what the label stage reads)."""
    sys.path.insert(0, str(ROOT))
    from prx_data.models.captioning import prompt as caption_prompt  # stdlib-only modules
    from prx_data.models.labeling import prompt as label_prompt

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import random

    from gpu_label_bench import synthetic_caption

    rng = random.Random(0)
    return [
        caption_prompt.SYSTEM_PROMPT,
        caption_prompt.USER_PROMPT,
        label_prompt.SYSTEM_PROMPT,
        label_prompt.USER_TEMPLATE,
        "visual text nsfw",
        *(synthetic_caption(rng) for _ in range(50)),
    ]


def build_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    trained = Tokenizer(models.BPE())
    trained.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=BPE_MERGES_VOCAB, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    trained.train_from_iterator(_corpus(), trainer)
    model = json.loads(trained.to_str())["model"]
    vocab: dict[str, int] = dict(model["vocab"])
    # Pad to Qwen's ordinary-token count with tokens no merge produces ("Ġ" spells a space
    # in the byte-level alphabet, so each decodes to plain text if a random model samples it).
    next_id = len(vocab)
    while next_id < ORDINARY_TOKENS:
        vocab[f"Ġ<pad{next_id}>"] = next_id
        next_id += 1
    merges = [tuple(m.split(" ", 1)) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    for name, wanted in sorted(SPECIAL_TOKEN_IDS.items(), key=lambda kv: kv[1]):
        tok.add_special_tokens([name])
        assert tok.token_to_id(name) == wanted, (name, tok.token_to_id(name), wanted)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", unk_token=None, model_max_length=262144
    )


def _rope(theta: float, mrope: list[int] | None) -> dict:
    # The published config.json form (transformers 5 reads it into rope_parameters).
    scaling: dict = {"rope_type": "default"}
    if mrope:
        scaling.update(mrope_section=mrope, mrope_interleaved=True)
    return {"rope_theta": theta, "rope_scaling": scaling}


def _text_config(scale: Scale, *, vl: bool) -> dict:
    t = text_dims(scale, vl=vl)
    mrope = ([24, 20, 20] if scale == "real" else [16, 8, 8]) if vl else None
    return {
        "vocab_size": t.vocab,
        "hidden_size": t.hidden,
        "intermediate_size": t.intermediate,
        "num_hidden_layers": t.layers,
        "num_attention_heads": t.heads,
        "num_key_value_heads": t.kv_heads,
        "head_dim": t.head_dim,
        "max_position_embeddings": t.max_positions,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-6,
        "attention_bias": False,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "bos_token_id": SPECIAL_TOKEN_IDS["<|endoftext|>"],
        "eos_token_id": SPECIAL_TOKEN_IDS["<|im_end|>"],
        **_rope(t.rope_theta, mrope),
    }


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2))


def _generation_config(path: Path) -> None:
    _write_json(
        path / "generation_config.json",
        {"eos_token_id": SPECIAL_TOKEN_IDS["<|im_end|>"], "pad_token_id": SPECIAL_TOKEN_IDS["<|endoftext|>"]},
    )


def build_qwen3(path: Path, scale: Scale) -> Path:
    from prx_data_tests.models.tiny_models import TEXT_CHAT_TEMPLATE

    path.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer()
    tokenizer.chat_template = TEXT_CHAT_TEMPLATE
    tokenizer.save_pretrained(path)
    _write_json(path / "config.json", {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", **_text_config(scale, vl=False)})
    _generation_config(path)
    return path


def build_qwen3_vl(path: Path, scale: Scale) -> Path:
    from transformers import Qwen3VLProcessor

    try:  # transformers 5 names the PIL image processor apart
        from transformers import Qwen2VLImageProcessorPil as ImageProcessor
    except ImportError:
        from transformers import Qwen2VLImageProcessorFast as ImageProcessor
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor
    from transformers.utils import is_torchvision_available

    from prx_data_tests.models.tiny_vlm import CHAT_TEMPLATE

    v = vision_dims(scale)
    path.mkdir(parents=True, exist_ok=True)
    image_processor = ImageProcessor(
        patch_size=v.patch,
        temporal_patch_size=v.temporal_patch,
        merge_size=v.merge,
        image_mean=[0.5] * 3,
        image_std=[0.5] * 3,
        size={"shortest_edge": 65536, "longest_edge": 16777216},
    )
    video = Qwen3VLVideoProcessor() if is_torchvision_available() else None
    Qwen3VLProcessor(
        image_processor=image_processor, tokenizer=build_tokenizer(), video_processor=video, chat_template=CHAT_TEMPLATE
    ).save_pretrained(path)
    text = _text_config(scale, vl=True)
    text["architectures"] = ["Qwen3ForCausalLM"]  # vLLM 0.29's CPU platform reads it (tiny_models.py)
    vision = {
        "depth": v.depth,
        "hidden_size": v.hidden,
        "intermediate_size": v.intermediate,
        "num_heads": v.heads,
        "patch_size": v.patch,
        "temporal_patch_size": v.temporal_patch,
        "spatial_merge_size": v.merge,
        "in_channels": 3,
        "out_hidden_size": v.out_hidden,
        "num_position_embeddings": v.position_embeddings,
        "deepstack_visual_indexes": list(v.deepstack),
        "hidden_act": "gelu_pytorch_tanh",
        "initializer_range": 0.02,
        "model_type": "qwen3_vl",
    }
    ids = SPECIAL_TOKEN_IDS
    _write_json(
        path / "config.json",
        {
            "architectures": ["Qwen3VLForConditionalGeneration"],
            "model_type": "qwen3_vl",
            "tie_word_embeddings": False,
            "text_config": {"model_type": "qwen3_vl_text", **text},
            "vision_config": vision,
            "image_token_id": ids["<|image_pad|>"],
            "video_token_id": ids["<|video_pad|>"],
            "vision_start_token_id": ids["<|vision_start|>"],
            "vision_end_token_id": ids["<|vision_end|>"],
            "eos_token_id": ids["<|im_end|>"],
            "torch_dtype": "bfloat16",
        },
    )
    _generation_config(path)
    return path


def build_all(out: Path, scale: Scale) -> dict[str, Path]:
    return {"qwen3-vl": build_qwen3_vl(out / "qwen3-vl", scale), "qwen3": build_qwen3(out / "qwen3", scale)}


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out")
    p.add_argument("--scale", choices=["real", "tiny"], default="real")
    a = p.parse_args()
    sys.path.insert(0, str(ROOT))
    for name, where in build_all(Path(a.out), a.scale).items():
        print(f"{name}: {where}")
