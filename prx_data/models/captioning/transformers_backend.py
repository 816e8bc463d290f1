"""The ``transformers`` backend: a local Qwen-VL checkpoint run with transformers ``generate``.

For small runs and machines without vLLM (CPU included). The model is loaded on first use, so
an instance can be created cheaply and shipped to a Ray actor, which loads it once.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from prx_data.core.reasons import with_detail
from prx_data.models.captioning.base import BaseCaptioner, CaptionResult, CaptionRow
from prx_data.models.captioning.base import CaptionErrorCode as E
from prx_data.models.captioning.config import TransformersCaptionerConfig
from prx_data.models.captioning.images import load_for_captioning
from prx_data.models.captioning.prompt import SYSTEM_PROMPT, USER_PROMPT, caption_prompt_version
from prx_data.models.captioning.quality import judge_caption


def hf_messages(image: Any) -> list[dict]:
    """The prompt in the form HF processors' chat templates take (image object in the content)."""
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {
            "role": "user",
            "content": [{"type": "image", "image": image}, {"type": "text", "text": USER_PROMPT}],
        },
    ]


class TransformersCaptioner(BaseCaptioner):
    @property
    def version(self) -> str:
        return caption_prompt_version()

    def __init__(self, config: TransformersCaptionerConfig) -> None:
        self.config = config
        self.model_id = config.model_id or str(Path(config.model_path))
        # transformers objects, loaded on first use (transformers is a heavy import, kept lazy).
        self._model: Any = None
        self._processor: Any = None

    def __getstate__(self) -> dict:
        # Ship the config, not the weights: each Ray worker loads the model once itself.
        return {**self.__dict__, "_model": None, "_processor": None}

    def close(self) -> None:
        """Release the model and its processor (loaded again on next use)."""
        self._model = self._processor = None

    def _load(self) -> None:
        if self._model is not None:
            return
        from transformers import AutoModelForImageTextToText, AutoProcessor

        cfg = self.config
        processor = AutoProcessor.from_pretrained(cfg.model_path, local_files_only=True)
        # Left padding: generation appends after the last position of every row.
        processor.tokenizer.padding_side = "left"
        model = AutoModelForImageTextToText.from_pretrained(cfg.model_path, dtype=cfg.dtype, local_files_only=True)
        self._processor = processor
        # transformers types .to through functools.wraps(Module.to), as if the model were its
        # first argument: its stub is wrong, the call is right.
        self._model = model.to(cfg.device).eval()  # type: ignore[arg-type]

    def render_prompt(self, image: Any = None) -> str:
        """The exact text the model sees (with the image placeholder tokens)."""
        self._load()
        return self._processor.apply_chat_template(hf_messages(image), tokenize=False, add_generation_prompt=True)

    def run_batch(self, rows: Sequence[CaptionRow]) -> list[CaptionResult]:
        results: list[CaptionResult | None] = [None] * len(rows)
        images = {}
        for i, row in enumerate(rows):
            try:
                images[i] = load_for_captioning(row.get("image"), self.config.image)
            except Exception as exc:
                results[i] = CaptionResult(error=with_detail(E.BAD_IMAGE, repr(exc)))
        if images:
            self._load()
        todo = list(images)
        step = self.config.batch_size
        for start in range(0, len(todo), step):
            chunk = todo[start : start + step]
            try:
                outputs = self._generate([images[i] for i in chunk])
            except Exception:
                # One pathological image must not cost its batch-mates their captions.
                outputs = [self._generate_one(images[i]) for i in chunk]
            for i, out in zip(chunk, outputs):
                results[i] = out
        return results  # type: ignore[return-value]

    def _generate_one(self, image: Any) -> CaptionResult:
        try:
            return self._generate([image])[0]
        except Exception as exc:
            return CaptionResult(error=with_detail(E.INFERENCE_ERROR, repr(exc)))

    def _generate(self, images: list[Any]) -> list[CaptionResult]:
        guards = self.config.guards
        return [judge_caption(text, finish_reason=finish, guards=guards) for text, finish in self.generate_raw(images)]

    def generate_raw(self, images: list[Any]) -> list[tuple[str, str]]:
        """(text, finish_reason) per prepared PIL image, before the quality guards."""
        import torch

        self._load()
        cfg = self.config
        processor, model = self._processor, self._model
        texts = [processor.apply_chat_template(hf_messages(im), tokenize=False, add_generation_prompt=True) for im in images]
        inputs = processor(text=texts, images=[[im] for im in images], padding=True, return_tensors="pt").to(model.device)
        sampling = cfg.sampling
        kwargs: dict[str, Any] = {"max_new_tokens": sampling.max_tokens, "do_sample": cfg.do_sample}
        if cfg.do_sample:
            kwargs.update(temperature=sampling.temperature, top_p=sampling.top_p)
            if sampling.top_k is not None:
                kwargs["top_k"] = sampling.top_k
        with torch.inference_mode():
            generated = model.generate(**inputs, **kwargs)
        new_tokens = generated[:, inputs["input_ids"].shape[1] :]
        eos = _eos_ids(model)
        results = []
        for row in new_tokens:
            ids = row.tolist()
            # generate() stops when every row hit eos or max_new_tokens, so no eos means cut off.
            finish = "stop" if any(t in eos for t in ids) else "length"
            results.append((processor.decode(row, skip_special_tokens=True), finish))
        return results


def _eos_ids(model: Any) -> set[int]:
    eos = getattr(model.generation_config, "eos_token_id", None)
    if eos is None:
        return set()
    return set(eos) if isinstance(eos, (list, tuple)) else {eos}
