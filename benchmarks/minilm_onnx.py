"""all-MiniLM-L6-v2 on ONNX Runtime, for ``bench_labels.py --engines``: the candidate CPU engine
measured against the numpy forward pass and torch.

No exporter: the checkpoint ships no ONNX file and exporting one needs torch, so the graph is
written here with ``onnx.helper`` from the weights ``NumpyBertEncoder`` already loaded (the same
post-LayerNorm BERT, exact GELU through Erf, mean pooling, L2 norm). Tokenizing, length-sorted
batching and padding are the numpy encoder's; only ``_forward`` runs in ONNX Runtime.
"""

from __future__ import annotations

import numpy as np

from prx_data.models.labeling.bert_numpy import NumpyBertEncoder


def build_graph(enc: NumpyBertEncoder) -> bytes:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    inits: list = []
    nodes: list = []

    def const(name: str, value: np.ndarray) -> str:
        # np.ascontiguousarray makes a 0-d array 1-d; Gather needs its index a scalar.
        inits.append(numpy_helper.from_array(np.array(value, order="C"), name))
        return name

    def node(op: str, inputs: list[str], out: str, **attrs) -> str:
        nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    heads, hidden = enc.heads, enc.hidden
    dim = hidden // heads
    const("word", enc.word)
    const("position", enc.position)
    const("token_type", enc.token_type)
    const("emb_ln_w", enc.emb_ln[0])
    const("emb_ln_b", enc.emb_ln[1])
    const("qkv_shape", np.array([0, 0, 3, heads, dim], dtype=np.int64))
    const("ctx_shape", np.array([0, 0, hidden], dtype=np.int64))
    const("scale", np.array(1 / np.sqrt(dim), dtype=np.float32))
    const("inv_sqrt2", np.array(1 / np.sqrt(2), dtype=np.float32))
    const("half", np.array(0.5, dtype=np.float32))
    const("one", np.array(1.0, dtype=np.float32))
    const("axis1", np.array([1], dtype=np.int64))
    for i in range(3):
        const(f"idx{i}", np.array(i, dtype=np.int64))

    x = node("Gather", ["word", "ids"], "e_word")
    x = node("Add", [x, node("Gather", ["position", "positions"], "e_pos")], "e_sum1")
    x = node("Add", [x, node("Gather", ["token_type", "types"], "e_type")], "e_sum2")
    x = node("LayerNormalization", [x, "emb_ln_w", "emb_ln_b"], "e_ln", axis=-1, epsilon=enc.eps)
    for n, layer in enumerate(enc.layers):
        p = f"l{n}_"
        for field in ("qkv_w", "qkv_b", "out_w", "out_b", "ln1_w", "ln1_b", "up_w", "up_b", "down_w", "down_b", "ln2_w", "ln2_b"):
            const(p + field, getattr(layer, field))
        qkv = node("Add", [node("MatMul", [x, p + "qkv_w"], p + "qkv_mm"), p + "qkv_b"], p + "qkv")
        qkv = node("Reshape", [qkv, "qkv_shape"], p + "qkv5")
        qkv = node("Transpose", [qkv], p + "qkvT", perm=[2, 0, 3, 1, 4])  # (3, B, H, L, D)
        q, k, v = (node("Gather", [qkv, f"idx{i}"], f"{p}{name}", axis=0) for i, name in enumerate("qkv"))
        kt = node("Transpose", [k], p + "kT", perm=[0, 1, 3, 2])
        scores = node("Mul", [node("MatMul", [q, kt], p + "qk"), "scale"], p + "scaled")
        scores = node("Add", [scores, "key_bias"], p + "masked")
        probs = node("Softmax", [scores], p + "probs", axis=-1)
        ctx = node("Transpose", [node("MatMul", [probs, v], p + "ctx")], p + "ctxT", perm=[0, 2, 1, 3])
        ctx = node("Reshape", [ctx, "ctx_shape"], p + "ctx3")
        att = node("Add", [node("MatMul", [ctx, p + "out_w"], p + "out_mm"), p + "out_b"], p + "out")
        att = node("LayerNormalization", [node("Add", [att, x], p + "res1"), p + "ln1_w", p + "ln1_b"], p + "ln1", axis=-1, epsilon=enc.eps)
        up = node("Add", [node("MatMul", [att, p + "up_w"], p + "up_mm"), p + "up_b"], p + "up")
        erf = node("Erf", [node("Mul", [up, "inv_sqrt2"], p + "up_s")], p + "erf")
        gelu = node("Mul", [node("Mul", [up, "half"], p + "up_h"), node("Add", [erf, "one"], p + "erf1")], p + "gelu")
        down = node("Add", [node("MatMul", [gelu, p + "down_w"], p + "down_mm"), p + "down_b"], p + "down")
        x = node(
            "LayerNormalization", [node("Add", [down, att], p + "res2"), p + "ln2_w", p + "ln2_b"], p + "ln2", axis=-1, epsilon=enc.eps
        )
    summed = node("ReduceSum", [node("Mul", [x, "mask3"], "masked_x"), "axis1"], "summed", keepdims=0)
    counts = node("ReduceSum", ["mask3", "axis1"], "counts", keepdims=0)
    pooled = node("Div", [summed, counts], "pooled")
    node("LpNormalization", [pooled], "embedding", axis=-1, p=2)

    graph = helper.make_graph(
        nodes,
        "minilm",
        [
            helper.make_tensor_value_info("ids", TensorProto.INT64, ["B", "L"]),
            helper.make_tensor_value_info("types", TensorProto.INT64, ["B", "L"]),
            helper.make_tensor_value_info("positions", TensorProto.INT64, [1, "L"]),
            helper.make_tensor_value_info("key_bias", TensorProto.FLOAT, ["B", 1, 1, "L"]),
            helper.make_tensor_value_info("mask3", TensorProto.FLOAT, ["B", "L", 1]),
        ],
        [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["B", hidden])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


class OnnxBertEncoder(NumpyBertEncoder):
    """The numpy encoder's tokenizing and batching, its forward pass in ONNX Runtime."""

    def __init__(self, model_dir, *, max_tokens: int = 256, threads: int = 1) -> None:
        import onnxruntime as ort

        super().__init__(model_dir, max_tokens=max_tokens)
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.session = ort.InferenceSession(build_graph(self), options, providers=["CPUExecutionProvider"])

    def _forward(self, ids: np.ndarray, types: np.ndarray, mask: np.ndarray) -> np.ndarray:
        length = ids.shape[1]
        feeds = {
            "ids": ids,
            "types": types,
            "positions": np.arange(length, dtype=np.int64)[None],
            "key_bias": np.where(mask[:, None, None, :] > 0, np.float32(0), np.float32(-1e9)),
            "mask3": mask[..., None].astype(np.float32),
        }
        return self.session.run(["embedding"], feeds)[0]
