"""Calibrate one GPU for Qwen3-VL-8B captions and Qwen3-8B labels with torch alone (no vLLM).

Measures, at the models' own layer shapes (benchmarks/qwen_configs.py):
  - bf16 and FP8 (``torch._scaled_mm``, per-tensor scales) GEMM time per transformer layer for
    the token counts the engine runs (decode batches, chunked-prefill steps, vision batches);
  - SDPA attention at the vision tower's sequence (one 1024x1024 image = 4096 patches) and at a
    caption's prefill length;
  - HBM bandwidth (a large device-to-device copy);
then projects captions/s and labels/s from the arithmetic, printing every assumption.
Under 4 minutes on one H200 (about one on an idle one).

    python benchmarks/gpu_calibrate.py               # GPU; without one: a "no GPU" line, exit 0
    python benchmarks/gpu_calibrate.py --cpu-smoke   # the same code paths at toy sizes on CPU
    python benchmarks/gpu_calibrate.py --assumed     # the projection from assumed H200 rates only

The projection is an upper-bound style model: it counts GEMM, attention and memory time and
multiplies by an engine efficiency (``--engine-efficiency``, a guess until the weightless vLLM
benchmark measures the real engine). Figures printed as "assumed" were not measured here.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from qwen_configs import TextDims, VisionDims, text_dims, vision_dims  # noqa: E402

DECODE_BATCHES = (64, 128, 256, 512, 1024)
PREFILL_TOKENS = (2048, 8192, 16384)
VISION_PATCHES = (4096, 16384)
# H200 SXM datasheet: 989 TFLOPS dense bf16, 1979 dense FP8, 4.8 TB/s, 141 GB. The "assumed"
# rates are what well-tuned kernels typically reach of those, not measurements.
ASSUMED = {"bf16": 650.0, "fp8": 1150.0, "attn_vision": 350.0, "attn_text": 450.0, "hbm": 4.0e12, "memory": 141e9}


@dataclass
class Rates:
    """Measured (or assumed) kernel figures: seconds per layer at a token count, TFLOPS, B/s."""

    text_layer_s: dict[str, dict[int, float]] = field(default_factory=dict)  # dtype -> M -> s
    vision_layer_s: dict[str, dict[int, float]] = field(default_factory=dict)
    lm_head_s: dict[int, float] = field(default_factory=dict)  # bf16 (vLLM keeps lm_head unquantized)
    attn_vision_tflops: float = 0.0
    attn_text_tflops: float = 0.0
    hbm_bytes_s: float = 0.0
    memory_bytes: float = 0.0
    source: str = "measured"

    def layer_s(self, table: dict[str, dict[int, float]], dtype: str, m: int) -> float:
        """Seconds for m tokens: the nearest measured token count, scaled linearly."""
        measured = table[dtype]
        nearest = min(measured, key=lambda k: abs(math.log(k / m)))
        return measured[nearest] * m / nearest


def linear_flops(params: int, tokens: int) -> float:
    return 2.0 * params * tokens


def assumed_rates(text: TextDims, vision: VisionDims) -> Rates:
    """Rates from ASSUMED: GEMMs at full assumed TFLOPS, lm_head at assumed bf16."""
    r = Rates(source="assumed (H200 datasheet x typical kernel efficiency)")
    for dtype in ("bf16", "fp8"):
        tf = ASSUMED[dtype] * 1e12
        r.text_layer_s[dtype] = {m: linear_flops(text.linear_params_per_layer(), m) / tf for m in (*DECODE_BATCHES, *PREFILL_TOKENS)}
        r.vision_layer_s[dtype] = {m: linear_flops(vision.linear_params_per_layer(), m) / tf for m in VISION_PATCHES}
    # Small-batch decode GEMMs read the whole weight each step: never faster than the bandwidth.
    for dtype, nbytes in (("bf16", 2), ("fp8", 1)):
        floor = text.linear_params_per_layer() * nbytes / ASSUMED["hbm"]
        r.text_layer_s[dtype] = {m: max(s, floor) for m, s in r.text_layer_s[dtype].items()}
    r.lm_head_s = {
        m: max(linear_flops(text.vocab * text.hidden, m) / (ASSUMED["bf16"] * 1e12), text.vocab * text.hidden * 2 / ASSUMED["hbm"])
        for m in DECODE_BATCHES
    }
    r.attn_vision_tflops, r.attn_text_tflops = ASSUMED["attn_vision"], ASSUMED["attn_text"]
    r.hbm_bytes_s, r.memory_bytes = ASSUMED["hbm"], ASSUMED["memory"]
    return r


# ----------------------------------------------------------------------------- measurement


def _timer(torch, device: str, budget_s: float, min_calls: int):
    def run(fn) -> float:
        """Mean seconds per call after a warm-up call, over at least min_calls calls and about
        budget_s (at most 200 calls)."""
        fn()
        sync()
        n, start = 0, time.perf_counter()
        while True:
            fn()
            n += 1
            if n >= min_calls and (n >= 200 or time.perf_counter() - start > budget_s):
                break
        sync()
        return (time.perf_counter() - start) / n

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    return run


def _gemm(torch, device: str, dtype: str, m: int, n: int, k: int):
    """One (m,k) x (k,n) product as the engine runs it: bf16 matmul, or FP8 with per-tensor
    scales into bf16 (the weight is stored (n,k) and passed transposed, column-major)."""
    a = torch.randn(m, k, device=device, dtype=torch.bfloat16)
    w = torch.randn(n, k, device=device, dtype=torch.bfloat16)
    if dtype == "bf16":
        return lambda: a @ w.t()
    a8, w8 = a.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn)
    one = torch.tensor(1.0, device=device)
    return lambda: torch._scaled_mm(a8, w8.t(), scale_a=one, scale_b=one, out_dtype=torch.bfloat16)


def text_shapes(t: TextDims) -> list[tuple[int, int]]:
    q, kv = t.heads * t.head_dim, 2 * t.kv_heads * t.head_dim
    # (n, k) of the fused layers vLLM runs: qkv, o, gate_up, down.
    return [(q + kv, t.hidden), (t.hidden, q), (2 * t.intermediate, t.hidden), (t.hidden, t.intermediate)]


def vision_shapes(v: VisionDims) -> list[tuple[int, int]]:
    return [(3 * v.hidden, v.hidden), (v.hidden, v.hidden), (v.intermediate, v.hidden), (v.hidden, v.intermediate)]


def measure(
    torch,
    device: str,
    text: TextDims,
    vision: VisionDims,
    *,
    decode=DECODE_BATCHES,
    prefill=PREFILL_TOKENS,
    patches=VISION_PATCHES,
    vision_seq: int = 4096,
    text_seq: int = 1124,
    copy_bytes: int = 4 << 30,
    budget_s: float = 0.25,
    min_calls: int = 5,
    log=print,
) -> Rates:
    timer = _timer(torch, device, budget_s, min_calls)
    r = Rates()
    for dtype in ("bf16", "fp8"):
        r.text_layer_s[dtype] = {}
        for m in (*decode, *prefill):
            r.text_layer_s[dtype][m] = sum(timer(_gemm(torch, device, dtype, m, n, k)) for n, k in text_shapes(text))
            tf = linear_flops(text.linear_params_per_layer(), m) / r.text_layer_s[dtype][m] / 1e12
            log(f"  text layer GEMMs {dtype:4s} M={m:6d}: {r.text_layer_s[dtype][m] * 1e6:9.1f} us  {tf:7.1f} TFLOPS")
        r.vision_layer_s[dtype] = {}
        for m in patches:
            r.vision_layer_s[dtype][m] = sum(timer(_gemm(torch, device, dtype, m, n, k)) for n, k in vision_shapes(vision))
            tf = linear_flops(vision.linear_params_per_layer(), m) / r.vision_layer_s[dtype][m] / 1e12
            log(f"  vision layer GEMMs {dtype:4s} M={m:6d}: {r.vision_layer_s[dtype][m] * 1e6:9.1f} us  {tf:7.1f} TFLOPS")
    for m in decode:
        r.lm_head_s[m] = timer(_gemm(torch, device, "bf16", m, text.vocab, text.hidden))
    log(f"  lm_head bf16 M={decode[-1]}: {r.lm_head_s[decode[-1]] * 1e6:.1f} us")

    import torch.nn.functional as F

    vh = vision.hidden // vision.heads
    q = torch.randn(1, vision.heads, vision_seq, vh, device=device, dtype=torch.bfloat16)
    t = timer(lambda: F.scaled_dot_product_attention(q, q, q))
    r.attn_vision_tflops = 4.0 * vision_seq**2 * vision.hidden / t / 1e12
    log(f"  SDPA vision (1 image, {vision_seq} patches, {vision.heads}x{vh}): {t * 1e3:.2f} ms  {r.attn_vision_tflops:.1f} TFLOPS")
    q = torch.randn(1, text.heads, text_seq, text.head_dim, device=device, dtype=torch.bfloat16)
    kv = torch.randn(1, text.kv_heads, text_seq, text.head_dim, device=device, dtype=torch.bfloat16)
    kv = kv.repeat_interleave(text.heads // text.kv_heads, dim=1)  # GQA as plain heads: same FLOPs
    t = timer(lambda: F.scaled_dot_product_attention(q, kv, kv, is_causal=True))
    r.attn_text_tflops = 2.0 * text_seq**2 * text.heads * text.head_dim / t / 1e12  # causal: half of 4·S²·d
    log(f"  SDPA text causal ({text_seq} tokens, {text.heads}q/{text.kv_heads}kv): {t * 1e3:.2f} ms  {r.attn_text_tflops:.1f} TFLOPS")

    src = torch.empty(copy_bytes // 2, device=device, dtype=torch.bfloat16)
    dst = torch.empty_like(src)
    t = timer(lambda: dst.copy_(src))
    r.hbm_bytes_s = 2.0 * copy_bytes / t  # read + write
    log(f"  copy {copy_bytes / 2**30:.2f} GiB: {r.hbm_bytes_s / 1e12:.2f} TB/s (read + write)")
    if device == "cuda":
        r.memory_bytes = float(torch.cuda.get_device_properties(0).total_memory)
    else:
        r.memory_bytes = ASSUMED["memory"]
    return r


# ----------------------------------------------------------------------------- projection


@dataclass(frozen=True)
class Workload:
    name: str
    weights: str  # "fp8" or "bf16"
    vision: str | None  # dtype of the vision tower's GEMMs; None: no image
    image_tokens: int
    prompt_tokens: int  # prefilled per request besides the image (prefix-cached part excluded)
    output_tokens: int
    kv_bytes: int  # 1 for the FP8 KV cache, 2 for bf16
    prefill_step: int  # max_num_batched_tokens
    max_num_seqs: int


def workloads(args) -> list[Workload]:
    cap = dict(prompt_tokens=args.caption_prompt_tokens, output_tokens=args.caption_tokens, prefill_step=16384, max_num_seqs=512)
    lab = dict(
        vision=None,
        image_tokens=0,
        prompt_tokens=args.label_prompt_tokens,
        output_tokens=args.label_tokens,
        prefill_step=32768,
        max_num_seqs=1024,
    )
    return [
        Workload("captions fp8 (default)", "fp8", "fp8", args.image_tokens, kv_bytes=1, **cap),
        Workload("captions fp8, vision bf16", "fp8", "bf16", args.image_tokens, kv_bytes=1, **cap),
        Workload("captions bf16", "bf16", "bf16", args.image_tokens, kv_bytes=2, **cap),
        Workload("captions fp8, 768-token cap", "fp8", "fp8", 768, kv_bytes=1, **cap),
        Workload("labels fp8 (default)", "fp8", kv_bytes=1, **lab),
        Workload("labels bf16", "bf16", kv_bytes=2, **lab),
    ]


def project(
    w: Workload,
    r: Rates,
    text: TextDims,
    vision: VisionDims,
    *,
    efficiency: float,
    gpu_memory_utilization: float = 0.92,
    activation_reserve: float = 10e9,
) -> dict[str, float]:
    """Seconds of GPU per request, split by phase, and requests/s. Phases run back to back
    (vLLM interleaves them in one step, which overlaps nothing on one GPU)."""
    # Vision tower: layer GEMMs + full attention over the image's patches + the patch mergers.
    vision_s = 0.0
    if w.vision:
        p = vision.patches(w.image_tokens)
        vision_s += vision.depth * r.layer_s(r.vision_layer_s, w.vision, p)
        vision_s += vision.depth * 4.0 * p**2 * vision.hidden / (r.attn_vision_tflops * 1e12)
        merger_flops = linear_flops(vision.merger_params(), w.image_tokens) * (1 + len(vision.deepstack))
        vision_s += merger_flops / linear_flops(vision.linear_params_per_layer(), 1) * (r.layer_s(r.vision_layer_s, w.vision, p) / p)
    # Prefill of the language model, in chunked-prefill steps of prefill_step tokens.
    tokens = w.image_tokens + w.prompt_tokens
    prefill_s = text.layers * r.layer_s(r.text_layer_s, w.weights, tokens)
    prefill_s += text.layers * 2.0 * tokens**2 * text.heads * text.head_dim / (r.attn_text_tflops * 1e12)
    # Decode: every step runs the whole batch; the batch is max_num_seqs unless the KV cache
    # (what is left of memory after weights and activations) holds fewer sequences.
    context = tokens + w.output_tokens / 2
    weight_bytes = text.layers * text.linear_params_per_layer() * (1 if w.weights == "fp8" else 2) + text.vocab * text.hidden * 2
    kv_room = r.memory_bytes * gpu_memory_utilization - weight_bytes - activation_reserve
    fit = int(kv_room / (text.kv_bytes_per_token(w.kv_bytes) * (tokens + w.output_tokens)))
    batch = max(1, min(w.max_num_seqs, fit))
    step_s = text.layers * r.layer_s(r.text_layer_s, w.weights, batch) + r.layer_s({"bf16": r.lm_head_s}, "bf16", batch)
    step_s += batch * context * text.kv_bytes_per_token(w.kv_bytes) / r.hbm_bytes_s
    decode_s = w.output_tokens * step_s / batch
    kernel_s = vision_s + prefill_s + decode_s
    return {
        "vision_ms": vision_s * 1e3,
        "prefill_ms": prefill_s * 1e3,
        "decode_ms": decode_s * 1e3,
        "batch": batch,
        "step_ms": step_s * 1e3,
        "per_s": efficiency / kernel_s,
    }


def print_projection(args, r: Rates, text: TextDims, vision: VisionDims) -> dict[str, dict[str, float]]:
    print(f"\nassumptions (rates: {r.source})")
    print(
        f"  Qwen3-8B / Qwen3-VL-8B text: hidden {text.hidden}, intermediate {text.intermediate}, {text.layers} layers, "
        f"{text.heads}q/{text.kv_heads}kv heads x {text.head_dim}, vocab {text.vocab}; "
        f"{text.layers * text.linear_params_per_layer() / 1e9:.2f} B linear params"
    )
    print(
        f"  vision: depth {vision.depth}, hidden {vision.hidden}, intermediate {vision.intermediate}, {vision.heads} heads, "
        f"patch {vision.patch}, merge {vision.merge}; {args.image_tokens} image tokens = "
        f"{vision.patches(args.image_tokens)} patches, full attention within the image"
    )
    print(
        f"  captions: {args.image_tokens} image + {args.caption_prompt_tokens} prompt tokens prefilled "
        f"(the ~250-token system prompt is prefix-cached), {args.caption_tokens} output tokens (ignore_eos)"
    )
    print(
        f"  labels: {args.label_prompt_tokens} prompt tokens (caption + template; the ~180-token system prompt "
        f"prefix-cached), {args.label_tokens} output tokens"
    )
    print(
        "  profile: max_num_seqs 512 / 1024, max_num_batched_tokens 16384 / 32768, gpu_memory_utilization 0.92, "
        "10 GB activations; lm_head bf16; FP8 per-tensor GEMMs stand in for vLLM's FP8 kernels"
    )
    print(
        f"  engine efficiency {args.engine_efficiency}: share of summed kernel time the engine reaches "
        "(norms, RoPE, sampling, scheduling, CPU gaps are not counted above) - a guess until measured"
    )
    print(
        f"  memory {r.memory_bytes / 1e9:.0f} GB, HBM {r.hbm_bytes_s / 1e12:.2f} TB/s, SDPA vision "
        f"{r.attn_vision_tflops:.0f} / text {r.attn_text_tflops:.0f} TFLOPS"
    )
    print(f"\n{'workload':30s} {'vision':>8s} {'prefill':>8s} {'decode':>8s}  {'batch':>5s} {'step':>7s}  {'rate':>9s}")
    out = {}
    for w in workloads(args):
        p = project(w, r, text, vision, efficiency=args.engine_efficiency)
        unit = "labels/s" if w.vision is None else "caps/s"
        print(
            f"{w.name:30s} {p['vision_ms']:6.2f}ms {p['prefill_ms']:6.2f}ms {p['decode_ms']:6.2f}ms  "
            f"{p['batch']:5d} {p['step_ms']:5.1f}ms  {p['per_s']:7.1f} {unit}"
        )
        out[w.name] = p
    print("targets per H200: captions >= 30/s, labels >= 300/s (per-request ms are GPU time per request at full batch)")
    return out


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cpu-smoke", action="store_true", help="toy sizes on CPU: checks the code paths, not a GPU")
    p.add_argument("--assumed", action="store_true", help="no measurement: project from the assumed H200 rates")
    p.add_argument("--image-tokens", type=int, default=1024)
    p.add_argument("--caption-prompt-tokens", type=int, default=100)
    p.add_argument("--caption-tokens", type=int, default=180)
    p.add_argument("--label-prompt-tokens", type=int, default=250)
    p.add_argument("--label-tokens", type=int, default=3)
    p.add_argument("--engine-efficiency", type=float, default=0.7)
    p.add_argument("--budget-s", type=float, default=0.25, help="seconds of timing per measured kernel")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    text, vision = text_dims("real", vl=True), vision_dims("real")
    if args.assumed:
        print_projection(args, assumed_rates(text, vision), text, vision)
        return 0
    try:
        import torch
    except ImportError:
        print("no GPU: torch is not installed here; nothing measured (--assumed projects from assumed rates)")
        return 0
    started = time.perf_counter()
    if args.cpu_smoke:
        # Toy sizes, CPU: exercises every measurement and the projection; the figures mean nothing.
        text, vision = text_dims("tiny", vl=True), vision_dims("tiny")
        print("cpu smoke: toy shapes on CPU; the rates below say nothing about a GPU")
        r = measure(
            torch,
            "cpu",
            text,
            vision,
            decode=(16,),
            prefill=(32,),
            patches=(64,),
            vision_seq=64,
            text_seq=64,
            copy_bytes=8 << 20,
            budget_s=0.0,
            min_calls=1,
        )
        r.source = "measured on CPU at toy sizes (smoke only)"
        args.image_tokens = 16
        print_projection(args, r, text, vision)
        print(f"cpu smoke done in {time.perf_counter() - started:.1f}s")
        return 0
    if not torch.cuda.is_available():
        print(
            f"no GPU: torch {torch.__version__} sees no CUDA device; nothing measured. "
            "Run on a GPU node, or --cpu-smoke (code paths) / --assumed (projection from assumed rates)."
        )
        return 0
    props = torch.cuda.get_device_properties(0)
    print(f"device: {props.name}, {props.total_memory / 2**30:.0f} GiB, torch {torch.__version__}, CUDA {torch.version.cuda}")
    if props.major < 9 and not (props.major == 8 and props.minor >= 9):
        print("  (FP8 GEMMs need compute capability 8.9+: the fp8 rows will fail on this GPU)")
    torch.backends.cuda.matmul.allow_tf32 = False
    r = measure(torch, "cuda", text, vision, budget_s=args.budget_s)
    r.source = f"measured on {props.name} in {time.perf_counter() - started:.0f}s"
    print_projection(args, r, text, vision)
    print(f"gpu_calibrate: {time.perf_counter() - started:.0f}s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
