"""Hand-labelled captions for the CPU label backend.

``eval.jsonl`` (332 captions) is the evaluation set: never used to choose prototypes, cues,
weights or the threshold. ``dev.jsonl`` (103) is the tuning set. Both are written like PRX's VLM
captions (100-200 words, with a few short alt-text lines in dev), labelled by hand
(``visual`` / ``text`` / ``nsfw``), with a free-form ``kind``.
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
SETS = ("eval", "dev")


def load(name: str = "eval") -> list[dict]:
    if name not in SETS:
        raise ValueError(f"unknown caption set {name!r}: one of {SETS}")
    with open(HERE / f"{name}.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]
