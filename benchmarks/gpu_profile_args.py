"""Shared CLI of the GPU benchmarks: the H200 profile (the config defaults) with overrides."""

from __future__ import annotations

import json


def add_profile_args(p) -> None:
    p.add_argument("--replicas", type=int, default=None, help="default: number of GPUs")
    p.add_argument("--worker-env", choices=["none", "python", "image", "pip"], default="none")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=JSON",
        help="override a profile setting, e.g. --set max_num_seqs=256 --set quantization=null",
    )


def overrides(args) -> dict:
    out = {}
    for item in args.set:
        key, _, value = item.partition("=")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def print_profile(cfg, engine: dict) -> None:
    shown = cfg.model_dump(exclude={"sampling", "guards", "image", "text_heavy_image", "worker_env"})
    print("profile:", json.dumps(shown, sort_keys=True, default=str))
    print("engine :", json.dumps(engine, sort_keys=True, default=str))
