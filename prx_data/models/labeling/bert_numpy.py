"""A BERT sentence encoder in numpy: the ``minilm`` label backend's CPU path.

all-MiniLM-L6-v2 is six layers of 384 wide; on a CPU its forward pass is a few small matrix
products per token. Running it through torch + transformers costs their imports before the first
caption (a fresh process's first 20 labels: 6.4 CPU-s against 2.6 here, benchmarks/bench_labels.py
--engines), paid by every Ray worker that labels; the weights load in a fraction of a second.
This module reads the same checkpoint (``model.safetensors``, ``tokenizer.json``) with ``safetensors.numpy``
and ``tokenizers`` and computes the same function (post-LayerNorm BERT, exact GELU, mean pooling,
L2 norm); prx_data_tests/models/test_bert_numpy.py checks it against transformers.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file
from scipy.special import erf
from tokenizers import Tokenizer


def _gelu(x: np.ndarray) -> np.ndarray:
    """BERT's exact GELU, 0.5 x (1 + erf(x / sqrt 2)), in place on ``x`` (a fresh temporary, the
    largest array of the forward pass)."""
    half = erf(x * np.float32(1 / np.sqrt(2)))
    half += 1.0
    half *= 0.5
    x *= half
    return x


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


@dataclass
class _Layer:
    qkv_w: np.ndarray  # (hidden, 3 * hidden): query, key and value in one product
    qkv_b: np.ndarray
    out_w: np.ndarray
    out_b: np.ndarray
    ln1_w: np.ndarray
    ln1_b: np.ndarray
    up_w: np.ndarray
    up_b: np.ndarray
    down_w: np.ndarray
    down_b: np.ndarray
    ln2_w: np.ndarray
    ln2_b: np.ndarray


class NumpyBertEncoder:
    """Mean-pooled, L2-normalized sentence embeddings from a BERT checkpoint folder."""

    def __init__(self, model_dir: str | Path, *, max_tokens: int = 256) -> None:
        model_dir = Path(model_dir)
        config = json.loads((model_dir / "config.json").read_text())
        if config.get("model_type") != "bert" or config.get("hidden_act") != "gelu":
            raise ValueError(
                f"{model_dir}: not a BERT checkpoint with exact GELU (config: {config.get('model_type')}, {config.get('hidden_act')})"
            )
        self.heads = int(config["num_attention_heads"])
        self.eps = float(config["layer_norm_eps"])
        weights = load_file(str(model_dir / "model.safetensors"))
        # Checkpoints saved from BertModel have no prefix; from a task head, "bert.".
        prefix = "bert." if "bert.embeddings.word_embeddings.weight" in weights else ""
        w = {k[len(prefix) :]: v for k, v in weights.items() if k.startswith(prefix)}
        self.word = w["embeddings.word_embeddings.weight"]
        self.position = w["embeddings.position_embeddings.weight"]
        self.token_type = w["embeddings.token_type_embeddings.weight"]
        self.emb_ln = (w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        self.layers = []
        for i in range(int(config["num_hidden_layers"])):
            p = f"encoder.layer.{i}."
            # torch Linear keeps (out, in); transposed once here so a forward pass is x @ W.
            qkv = [w[f"{p}attention.self.{n}.weight"].T for n in ("query", "key", "value")]
            self.layers.append(
                _Layer(
                    qkv_w=np.ascontiguousarray(np.concatenate(qkv, axis=1)),
                    qkv_b=np.concatenate([w[f"{p}attention.self.{n}.bias"] for n in ("query", "key", "value")]),
                    out_w=np.ascontiguousarray(w[f"{p}attention.output.dense.weight"].T),
                    out_b=w[f"{p}attention.output.dense.bias"],
                    ln1_w=w[f"{p}attention.output.LayerNorm.weight"],
                    ln1_b=w[f"{p}attention.output.LayerNorm.bias"],
                    up_w=np.ascontiguousarray(w[f"{p}intermediate.dense.weight"].T),
                    up_b=w[f"{p}intermediate.dense.bias"],
                    down_w=np.ascontiguousarray(w[f"{p}output.dense.weight"].T),
                    down_b=w[f"{p}output.dense.bias"],
                    ln2_w=w[f"{p}output.LayerNorm.weight"],
                    ln2_b=w[f"{p}output.LayerNorm.bias"],
                )
            )
        self.hidden = self.word.shape[1]
        self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        # The file's own settings (pad to 128, cut at 128) are the export's, not the model's.
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length=min(max_tokens, self.position.shape[0]))

    def _forward(self, ids: np.ndarray, types: np.ndarray, mask: np.ndarray) -> np.ndarray:
        batch, length = ids.shape
        x = self.word[ids] + self.position[:length][None] + self.token_type[types]
        x = _layer_norm(x, *self.emb_ln, self.eps)
        heads, dim = self.heads, self.hidden // self.heads
        # Padding keys get a large negative score, so they take no attention weight.
        key_bias = np.where(mask[:, None, None, :] > 0, np.float32(0), np.float32(-1e9))
        scale = np.float32(1 / np.sqrt(dim))
        # Linear layers on (tokens, features) 2-D arrays and attention on contiguous blocks: numpy
        # sends those to BLAS; a stacked matmul on strided views takes a loop 100x slower.
        x = x.reshape(batch * length, self.hidden)
        for layer in self.layers:
            qkv = (x @ layer.qkv_w + layer.qkv_b).reshape(batch, length, 3, heads, dim)
            q, k, v = (np.ascontiguousarray(qkv[:, :, i].transpose(0, 2, 1, 3)) for i in range(3))
            scores = np.matmul(q, np.ascontiguousarray(k.transpose(0, 1, 3, 2))) * scale + key_bias
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            scores /= scores.sum(-1, keepdims=True)
            context = np.matmul(scores, v).transpose(0, 2, 1, 3).reshape(batch * length, self.hidden)
            x = _layer_norm(context @ layer.out_w + layer.out_b + x, layer.ln1_w, layer.ln1_b, self.eps)
            up = _gelu(x @ layer.up_w + layer.up_b)
            x = _layer_norm(up @ layer.down_w + layer.down_b + x, layer.ln2_w, layer.ln2_b, self.eps)
        x = x.reshape(batch, length, self.hidden)
        weights = mask[..., None].astype(np.float32)
        pooled = (x * weights).sum(1) / np.maximum(weights.sum(1), np.float32(1e-9))
        return pooled / np.maximum(np.linalg.norm(pooled, axis=-1, keepdims=True), np.float32(1e-12))

    def embed(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """(len(texts), hidden) float32, in the order given."""
        out = np.empty((len(texts), self.hidden), dtype=np.float32)
        if not texts:
            return out
        encodings = self.tokenizer.encode_batch(list(texts))
        # Batches of similar lengths: less padding to compute (padding never changes a result).
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            length = max(len(encodings[i].ids) for i in rows)
            ids = np.zeros((len(rows), length), dtype=np.int64)
            types = np.zeros_like(ids)
            mask = np.zeros_like(ids)
            for r, i in enumerate(rows):
                enc = encodings[i]
                n = len(enc.ids)
                ids[r, :n], types[r, :n], mask[r, :n] = enc.ids, enc.type_ids, enc.attention_mask
            out[rows] = self._forward(ids, types, mask)
        return out

    def count_tokens(self, texts: Sequence[str]) -> int:
        """Tokens the forward pass of ``texts`` would run on (after truncation)."""
        return sum(len(e.ids) for e in self.tokenizer.encode_batch(list(texts)))
