"""benchmarks/gpu_fp8_agreement.py's comparison, on captions written by hand: identical caption
sets agree fully; a candidate that turns a photo caption into a document transcription is a
label disagreement and a low similarity. The captioning half needs a GPU (docs/gpu.md)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "gpu_fp8_agreement.py"

REFERENCE = {
    "a": "A red vintage bicycle leans against a weathered brick wall in soft morning light, its "
    "wicker basket holding a bunch of yellow tulips.",
    "b": "A close-up photograph of a tabby cat asleep on a knitted blue blanket beside a window.",
    "c": "An aerial view of a winding river through autumn forest, orange and gold trees on both banks.",
}


def run(tmp_path: Path, candidate: dict) -> subprocess.CompletedProcess:
    ref, cand = tmp_path / "reference.json", tmp_path / "candidate.json"
    ref.write_text(json.dumps(REFERENCE))
    cand.write_text(json.dumps(candidate))
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--from-json", str(ref), str(cand)], capture_output=True, text=True, timeout=300, cwd=ROOT
    )


def test_identical_captions_agree_fully(tmp_path):
    proc = run(tmp_path, REFERENCE)
    assert proc.returncode == 0, proc.stderr
    assert "images compared   : 3" in proc.stdout
    assert "label agreement   : 100.0%  confusions none" in proc.stdout
    assert "caption cosine    : median 1.000" in proc.stdout


def test_a_drifted_caption_shows_as_disagreement(tmp_path):
    drifted = {
        **REFERENCE,
        "c": "A scanned page of an invoice with a table of item numbers, prices and "
        "totals, and the words 'Payment due within 30 days' printed at the bottom.",
    }
    proc = run(tmp_path, drifted)
    assert proc.returncode == 0, proc.stderr
    assert "label agreement   : 66.7%  confusions {'visual->text': 1}" in proc.stdout
    p05 = float(proc.stdout.split("caption cosine    : median ")[1].split("p05 ")[1].split(" ")[0])
    assert p05 < 0.5
