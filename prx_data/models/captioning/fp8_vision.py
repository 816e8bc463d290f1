"""FP8 for the language model, bf16 for Qwen3-VL's vision tower (vLLM 0.29 engine arguments).

vLLM 0.29's ``quantization="fp8"`` quantizes every linear layer, the vision tower's too, and
reads an ignore list only from a pre-quantized checkpoint's config. Its online shorthands
(``vllm/config/quantization.py``) do take one from the engine arguments:
``quantization="fp8_per_channel"`` (per-output-channel weight scales, dynamic per-token
activation scales) with ``quantization_config={"ignore": [...]}``; an entry starting ``re:`` is
a regular expression ``re.match``-ed against each layer's module name, which in Qwen3-VL's
tower is ``visual.blocks.N...``, ``visual.merger...`` or ``visual.deepstack_merger_list.N...``.
(``quantization_config`` next to plain ``"fp8"`` is refused by vLLM.)

Why an option: the tower is about a quarter of a caption's FLOPs, but its errors reach every
token of the caption; its small GEMMs (hidden 1152) gain least from FP8. Whether FP8 hurts the
captions is measured by ``benchmarks/gpu_fp8_agreement.py`` (docs/gpu.md).
"""

from __future__ import annotations

from typing import Any

ONLINE_FP8 = "fp8_per_channel"
# Any module under the tower, whatever prefix a wrapper model puts in front of it.
VISION_TOWER_IGNORE = r"re:(.*\.)?visual\..*"
_FP8_NAMES = {"fp8", ONLINE_FP8}


def keep_vision_bf16(kwargs: dict[str, Any]) -> dict[str, Any]:
    """Engine kwargs with FP8 weights everywhere but the vision tower. Without FP8 there is
    nothing to keep: the kwargs come back unchanged."""
    quantization = kwargs.get("quantization")
    if quantization is None:
        return kwargs
    if quantization not in _FP8_NAMES:
        raise ValueError(f"vision_bf16 needs quantization 'fp8' or {ONLINE_FP8!r}, not {quantization!r}")
    config = dict(kwargs.get("quantization_config") or {})
    config["ignore"] = [*config.get("ignore", []), VISION_TOWER_IGNORE]
    return {**kwargs, "quantization": ONLINE_FP8, "quantization_config": config}
