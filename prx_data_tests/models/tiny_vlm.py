"""Build a tiny, randomly initialised Qwen3-VL checkpoint on disk, offline, in a few seconds.

The parts are the real ones (Qwen3VLForConditionalGeneration, Qwen3VLProcessor with the Qwen2-VL
image processor, a Qwen2 fast tokenizer, a Qwen3-VL style chat template), only tiny: so the
transformers captioner runs its real prompt + image path on CPU. The tokenizer is a byte-level
BPE trained here on a few sentences, with the special tokens the template and processor use.
"""

from __future__ import annotations

from pathlib import Path

# The Qwen3-VL Instruct chat template, reduced to what captioning uses (system, user with image
# and text parts, assistant, generation prompt); no tools, no video.
CHAT_TEMPLATE = (
    "{%- if messages[0].role == 'system' -%}"
    "{{- '<|im_start|>system\\n' -}}"
    "{%- if messages[0].content is string -%}{{- messages[0].content -}}"
    "{%- else -%}{%- for content in messages[0].content -%}"
    "{%- if 'text' in content -%}{{- content.text -}}{%- endif -%}{%- endfor -%}{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- set image_count = namespace(value=0) -%}"
    "{%- for message in messages -%}"
    "{%- if message.role == 'user' or message.role == 'assistant' -%}"
    "{{- '<|im_start|>' + message.role + '\\n' -}}"
    "{%- if message.content is string -%}{{- message.content -}}{%- else -%}"
    "{%- for content in message.content -%}"
    "{%- if content.type == 'image' or 'image' in content or 'image_url' in content -%}"
    "{%- set image_count.value = image_count.value + 1 -%}"
    "{%- if add_vision_id -%}Picture {{ image_count.value }}: {% endif -%}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{%- elif 'text' in content -%}{{- content.text -}}{%- endif -%}"
    "{%- endfor -%}{%- endif -%}"
    "{{- '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- '<|im_start|>assistant\\n' -}}{%- endif -%}"
)

SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
]


def _tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import Qwen2TokenizerFast

    from prx_data.models.captioning.prompt import SYSTEM_PROMPT, USER_PROMPT

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=600,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator([SYSTEM_PROMPT, USER_PROMPT, "A red cube on a wooden table."], trainer)
    return Qwen2TokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", unk_token=None)


def build_tiny_qwen3_vl(path: Path, seed: int = 0) -> Path:
    import torch
    from transformers import (
        Qwen2VLImageProcessorFast,
        Qwen3VLConfig,
        Qwen3VLForConditionalGeneration,
        Qwen3VLProcessor,
    )
    from transformers.models.qwen3_vl.video_processing_qwen3_vl import Qwen3VLVideoProcessor

    tokenizer = _tokenizer()
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    image_processor = Qwen2VLImageProcessorFast(
        patch_size=16,
        temporal_patch_size=2,
        merge_size=2,
        image_mean=[0.5, 0.5, 0.5],
        image_std=[0.5, 0.5, 0.5],
        size={"shortest_edge": 32 * 32, "longest_edge": 32 * 32 * 64},
    )
    processor = Qwen3VLProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        video_processor=Qwen3VLVideoProcessor(),
        chat_template=CHAT_TEMPLATE,
    )
    config = Qwen3VLConfig(
        text_config=dict(
            vocab_size=len(tokenizer),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            head_dim=16,
            max_position_embeddings=4096,
            # mrope sections split head_dim / 2 across (time, height, width).
            rope_scaling={
                "rope_type": "default",
                "mrope_section": [4, 2, 2],
                "mrope_interleaved": True,
            },
        ),
        vision_config=dict(
            depth=2,
            hidden_size=32,
            intermediate_size=64,
            num_heads=2,
            patch_size=16,
            spatial_merge_size=2,
            temporal_patch_size=2,
            out_hidden_size=32,
            num_position_embeddings=64,
            deepstack_visual_indexes=[1],
        ),
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
    )
    torch.manual_seed(seed)
    model = Qwen3VLForConditionalGeneration(config)
    model.generation_config.eos_token_id = ids["<|im_end|>"]
    model.generation_config.pad_token_id = ids["<|endoftext|>"]
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    processor.save_pretrained(path)
    return path
