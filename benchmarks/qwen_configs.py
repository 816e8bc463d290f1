"""Published dimensions of Qwen3-8B and Qwen3-VL-8B-Instruct, written out here (no hub).

Assumptions, from the models' published ``config.json`` files as of their release (not
re-checked against a download: nothing may be fetched from a model hub here):

- Qwen3-8B: hidden 4096, intermediate 12288, 36 layers, 32 query / 8 KV heads, head_dim 128,
  vocab 151936 embeddings, 40960 positions, rope_theta 1e6, untied lm_head, SiLU MLP.
- Qwen3-VL-8B-Instruct, text: the same dims as Qwen3-8B, rope_theta 5e6, interleaved M-RoPE
  with mrope_section [24, 20, 20], 262144 positions.
- Qwen3-VL-8B-Instruct, vision: depth 27, hidden 1152, intermediate 4304, 16 heads (head_dim 72),
  patch 16, temporal patch 2, spatial merge 2 (4 patches -> 1 token), out_hidden 4096,
  deepstack outputs after blocks 8, 16, 24, 2304 learned position embeddings, GELU(tanh).
  A 1024x1024 image: 64x64 = 4096 patches -> 1024 tokens.
- Token ids (the Qwen2/3 vocabulary): <|endoftext|> 151643, <|im_start|> 151644,
  <|im_end|> 151645, <|vision_start|> 151652, <|vision_end|> 151653, <|image_pad|> 151655,
  <|video_pad|> 151656, <think> 151667, </think> 151668; 151669 tokens in the tokenizer,
  151936 rows in the embedding.

``scale="tiny"`` keeps every structural feature (GQA ratio, deepstack, M-RoPE, special-token
ids, vocabulary size) and shrinks widths and depths so vLLM's CPU build runs it in CI. Its
head_dim stays 64: vLLM's attention backends reject 16.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Scale = Literal["real", "tiny"]

VOCAB_EMBEDDINGS = 151936
# Qwen's special tokens at their real ids; the ids below 151643 are ordinary BPE tokens.
SPECIAL_TOKEN_IDS: dict[str, int] = {
    "<|endoftext|>": 151643,
    "<|im_start|>": 151644,
    "<|im_end|>": 151645,
    "<|object_ref_start|>": 151646,
    "<|object_ref_end|>": 151647,
    "<|box_start|>": 151648,
    "<|box_end|>": 151649,
    "<|quad_start|>": 151650,
    "<|quad_end|>": 151651,
    "<|vision_start|>": 151652,
    "<|vision_end|>": 151653,
    "<|vision_pad|>": 151654,
    "<|image_pad|>": 151655,
    "<|video_pad|>": 151656,
    "<tool_call>": 151657,
    "</tool_call>": 151658,
    "<|fim_prefix|>": 151659,
    "<|fim_middle|>": 151660,
    "<|fim_suffix|>": 151661,
    "<|fim_pad|>": 151662,
    "<|repo_name|>": 151663,
    "<|file_sep|>": 151664,
    "<tool_response>": 151665,
    "</tool_response>": 151666,
    "<think>": 151667,
    "</think>": 151668,
}
ORDINARY_TOKENS = 151643


@dataclass(frozen=True)
class TextDims:
    hidden: int = 4096
    intermediate: int = 12288
    layers: int = 36
    heads: int = 32
    kv_heads: int = 8
    head_dim: int = 128
    vocab: int = VOCAB_EMBEDDINGS
    max_positions: int = 40960
    rope_theta: float = 1_000_000.0

    def linear_params_per_layer(self) -> int:
        q_out = self.heads * self.head_dim
        kv_out = 2 * self.kv_heads * self.head_dim
        return self.hidden * (q_out + kv_out) + q_out * self.hidden + 3 * self.hidden * self.intermediate

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        return 2 * self.kv_heads * self.head_dim * self.layers * dtype_bytes


@dataclass(frozen=True)
class VisionDims:
    depth: int = 27
    hidden: int = 1152
    intermediate: int = 4304
    heads: int = 16
    patch: int = 16
    temporal_patch: int = 2
    merge: int = 2
    out_hidden: int = 4096
    deepstack: tuple[int, ...] = (8, 16, 24)
    position_embeddings: int = 2304

    def patches(self, image_tokens: int) -> int:
        return image_tokens * self.merge**2

    def linear_params_per_layer(self) -> int:
        return 4 * self.hidden**2 + 2 * self.hidden * self.intermediate

    def merger_params(self) -> int:
        merged = self.hidden * self.merge**2
        return merged * merged + merged * self.out_hidden


def text_dims(scale: Scale, *, vl: bool) -> TextDims:
    if scale == "real":
        return TextDims(max_positions=262144, rope_theta=5_000_000.0) if vl else TextDims()
    return TextDims(
        hidden=256,
        intermediate=512,
        layers=2,
        heads=4,
        kv_heads=1,
        head_dim=64,
        max_positions=8192,
        rope_theta=5_000_000.0 if vl else 1_000_000.0,
    )


def vision_dims(scale: Scale) -> VisionDims:
    if scale == "real":
        return VisionDims()
    return VisionDims(depth=3, hidden=128, intermediate=256, heads=2, out_hidden=256, deepstack=(0, 1), position_embeddings=256)
