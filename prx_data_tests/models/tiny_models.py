"""Tiny random Qwen3-VL and Qwen3 checkpoints that vLLM can serve, built offline in seconds.

Real model classes, processor, tokenizer and chat templates, only tiny: a byte-level BPE trained
here on the prompts (every byte is in its alphabet, so structured output can spell any label or
JSON), head_dim 64 (vLLM's attention backends reject 16), 8192 positions.

Run it in the environment that serves the checkpoint (transformers 5 for vLLM 0.29):
``python -m prx_data_tests.models.tiny_models OUT_DIR`` writes ``OUT_DIR/qwen3-vl`` and
``OUT_DIR/qwen3``. Works with transformers 4.57 too (the Dagster side's version).
"""

from __future__ import annotations

import sys
from pathlib import Path

from prx_data_tests.models.tiny_vlm import CHAT_TEMPLATE as VL_CHAT_TEMPLATE

SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<think>",
    "</think>",
]

# Qwen3's template, reduced to plain string messages; with enable_thinking=False it writes the
# empty think block the real template writes, so the answer starts at once.
TEXT_CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{- '<|im_start|>' + message.role + '\\n' -}}"
    "{%- if message.content is string -%}{{- message.content -}}{%- else -%}"
    "{%- for content in message.content -%}{%- if 'text' in content -%}{{- content.text -}}"
    "{%- endif -%}{%- endfor -%}{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}"
    "{%- if enable_thinking is defined and enable_thinking is false -%}"
    "{{- '<think>\\n\\n</think>\\n\\n' -}}{%- endif -%}{%- endif -%}"
)

HEAD_DIM = 64
MAX_POSITIONS = 8192


def _transformers_major() -> int:
    import transformers

    return int(transformers.__version__.split(".")[0])


def _corpus() -> list[str]:
    from prx_data.core.schema import LABELS
    from prx_data.models.captioning import prompt as caption_prompt
    from prx_data.models.labeling import prompt as label_prompt

    return [
        caption_prompt.SYSTEM_PROMPT,
        caption_prompt.USER_PROMPT,
        label_prompt.SYSTEM_PROMPT,
        label_prompt.USER_TEMPLATE,
        " ".join(LABELS),
        'A red cube on a wooden table. {"caption": "", "label": ""}',
    ]


def build_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    try:  # transformers 5 folds the fast tokenizers into the plain names
        from transformers import Qwen2TokenizerFast as QwenTokenizer
    except ImportError:
        from transformers import Qwen2Tokenizer as QwenTokenizer

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=800,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer)
    return QwenTokenizer(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", unk_token=None)


def _rope(mrope: list[int] | None) -> dict:
    params: dict = {"rope_type": "default", "rope_theta": 1_000_000.0}
    if mrope:
        params.update(mrope_section=mrope, mrope_interleaved=True)
    key = "rope_parameters" if _transformers_major() >= 5 else "rope_scaling"
    if key == "rope_scaling":
        params.pop("rope_theta")
    return {key: params}


def _text_dims(vocab: int) -> dict:
    return dict(
        vocab_size=vocab,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=HEAD_DIM,
        max_position_embeddings=MAX_POSITIONS,
    )


def build_tiny_qwen3(path: Path, seed: int = 0) -> Path:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tokenizer = build_tokenizer()
    tokenizer.chat_template = TEXT_CHAT_TEMPLATE
    config = Qwen3Config(**_text_dims(len(tokenizer)), **_rope(None), tie_word_embeddings=True)
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config)
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    model.config.eos_token_id = eos
    model.generation_config.eos_token_id = eos
    model.generation_config.pad_token_id = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def build_tiny_qwen3_vl(path: Path, seed: int = 0) -> Path:
    import torch
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration, Qwen3VLProcessor

    try:  # transformers 5 without torchvision (the CPU vLLM env): the PIL image processor
        from transformers import Qwen2VLImageProcessorPil as ImageProcessor
    except ImportError:
        from transformers import Qwen2VLImageProcessorFast as ImageProcessor
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    tokenizer = build_tokenizer()
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    image_processor = ImageProcessor(
        patch_size=16,
        temporal_patch_size=2,
        merge_size=2,
        image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5],
        size={"shortest_edge": 32 * 32, "longest_edge": 32 * 32 * 256},
    )
    from transformers.utils import is_torchvision_available

    # The video processor needs torchvision, absent from the CPU vLLM env; captions use no video.
    video_processor = Qwen3VLVideoProcessor() if is_torchvision_available() else None
    processor = Qwen3VLProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=video_processor,
        chat_template=VL_CHAT_TEMPLATE,
    )
    config = Qwen3VLConfig(
        text_config=dict(**_text_dims(len(tokenizer)), **_rope([16, 8, 8])),
        vision_config=dict(
            depth=2,
            hidden_size=128,
            intermediate_size=256,
            num_heads=2,  # head_dim 64
            patch_size=16,
            spatial_merge_size=2,
            temporal_patch_size=2,
            out_hidden_size=128,
            num_position_embeddings=256,
            deepstack_visual_indexes=[1],
        ),
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
    )
    # vLLM 0.29's CPU platform checks the language model's sub-config for an architecture
    # (architectures[0]); without one it fails with IndexError at engine start.
    config.text_config.architectures = ["Qwen3ForCausalLM"]
    torch.manual_seed(seed)
    model = Qwen3VLForConditionalGeneration(config)
    model.config.eos_token_id = ids["<|im_end|>"]
    model.generation_config.eos_token_id = ids["<|im_end|>"]
    model.generation_config.pad_token_id = ids["<|endoftext|>"]
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    processor.save_pretrained(path)
    return path


def build_all(out: Path) -> dict[str, Path]:
    return {
        "qwen3-vl": build_tiny_qwen3_vl(out / "qwen3-vl"),
        "qwen3": build_tiny_qwen3(out / "qwen3"),
    }


if __name__ == "__main__":
    for name, where in build_all(Path(sys.argv[1])).items():
        print(f"{name}: {where}")
