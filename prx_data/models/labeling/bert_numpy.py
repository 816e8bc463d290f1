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
from tokenizers import Tokenizer

_F = np.float32
# erf by Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7), the approximation torch's vectorized CPU
# kernels compute; scipy's erf costs 15 ns an element, 4x this whole function.
_ERF_P = _F(0.3275911 / np.sqrt(2))  # applied to |x|, not |x| / sqrt 2
_ERF_POLY = tuple(_F(c) for c in (1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592))
# Token rows per step of the feed-forward block: its (rows, 1536) activations stay in cache and
# are reused, instead of a fresh 100 MB array (page faults) per layer.
_MLP_ROWS = 512
# Sequences per step of attention, for the same reason (scores are batch x heads x length^2).
_ATTENTION_SEQUENCES = 8


def _gelu(x: np.ndarray) -> np.ndarray:
    """BERT's exact GELU, 0.5 x (1 + erf(x / sqrt 2)), in place on ``x``, written as
    relu(x) - |x| / 2 * poly(t) * exp(-x^2 / 2) with t = 1 / (1 + p |x| / sqrt 2)."""
    a = np.abs(x)
    t = a * _ERF_P
    t += 1
    np.reciprocal(t, out=t)
    q = t * _ERF_POLY[0]
    q += _ERF_POLY[1]
    for c in _ERF_POLY[2:]:
        q *= t
        q += c
    q *= t
    e = np.square(x)
    e *= _F(-0.5)
    np.exp(e, out=e)
    q *= e
    q *= a
    q *= _F(0.5)
    np.maximum(x, 0, out=x)
    x -= q
    return x


def _layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    """In place on ``x``."""
    x -= x.mean(-1, keepdims=True)
    scale = np.square(x).mean(-1, keepdims=True)
    scale += _F(eps)
    np.sqrt(scale, out=scale)
    x /= scale
    x *= weight
    x += bias
    return x


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

    def _attention(self, qkv: np.ndarray, key_bias: np.ndarray) -> np.ndarray:
        """Self-attention of ``qkv`` (batch, length, 3, heads, dim): the context, (batch * length, hidden)."""
        batch, length, _, heads, dim = qkv.shape
        scale = _F(1 / np.sqrt(dim))
        context = np.empty((batch, length, heads, dim), dtype=_F)
        for start in range(0, batch, _ATTENTION_SEQUENCES):
            part = qkv[start : start + _ATTENTION_SEQUENCES]
            # Contiguous (sequences, heads, length, dim) blocks: numpy sends a stacked matmul
            # of those to BLAS; on strided views it takes a loop 100x slower.
            q, k, v = (np.ascontiguousarray(part[:, :, i].transpose(0, 2, 1, 3)) for i in range(3))
            q *= scale
            scores = np.matmul(q, k.transpose(0, 1, 3, 2))
            scores += key_bias[start : start + _ATTENTION_SEQUENCES]
            scores -= scores.max(-1, keepdims=True)
            np.exp(scores, out=scores)
            scores /= scores.sum(-1, keepdims=True)
            context[start : start + _ATTENTION_SEQUENCES] = np.matmul(scores, v).transpose(0, 2, 1, 3)
        return context.reshape(batch * length, heads * dim)

    def _feed_forward(self, x: np.ndarray, layer: _Layer) -> np.ndarray:
        out = np.empty_like(x)
        for start in range(0, len(x), _MLP_ROWS):
            part = x[start : start + _MLP_ROWS]
            up = part @ layer.up_w
            up += layer.up_b
            down = np.matmul(_gelu(up), layer.down_w, out=out[start : start + _MLP_ROWS])
            down += layer.down_b
            down += part
        return _layer_norm(out, layer.ln2_w, layer.ln2_b, self.eps)

    def _forward(self, ids: np.ndarray, types: np.ndarray, mask: np.ndarray) -> np.ndarray:
        batch, length = ids.shape
        x = self.word[ids] + self.position[:length][None] + self.token_type[types]
        x = _layer_norm(x, *self.emb_ln, self.eps)
        # Padding keys get a large negative score, so they take no attention weight.
        key_bias = np.where(mask[:, None, None, :] > 0, _F(0), _F(-1e9))
        # Linear layers on (tokens, features) 2-D arrays: one BLAS call each.
        x = x.reshape(batch * length, self.hidden)
        for layer in self.layers:
            qkv = x @ layer.qkv_w
            qkv += layer.qkv_b
            context = self._attention(qkv.reshape(batch, length, 3, self.heads, self.hidden // self.heads), key_bias)
            attended = context @ layer.out_w
            attended += layer.out_b
            attended += x
            x = self._feed_forward(_layer_norm(attended, layer.ln1_w, layer.ln1_b, self.eps), layer)
        x = x.reshape(batch, length, self.hidden)
        weights = mask[..., None].astype(_F)
        pooled = (x * weights).sum(1) / np.maximum(weights.sum(1), _F(1e-9))
        return pooled / np.maximum(np.linalg.norm(pooled, axis=-1, keepdims=True), _F(1e-12))

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
