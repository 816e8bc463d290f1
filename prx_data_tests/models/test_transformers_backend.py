"""The transformers backend on a tiny random Qwen3-VL built by the test (no downloads)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from prx_data.core.reasons import reason_code as error_code
from prx_data.models.captioning.base import CaptionErrorCode
from prx_data.models.captioning.config import CaptionSampling, TransformersCaptionerConfig
from prx_data.models.captioning.factory import make_captioner
from prx_data.models.captioning.images import ImageBudget
from prx_data.models.captioning.prompt import SYSTEM_PROMPT, USER_PROMPT
from prx_data.models.captioning.quality import CaptionGuards

if TYPE_CHECKING:
    from prx_data.models.captioning.transformers_backend import TransformersCaptioner
from prx_data_tests.models.images import NOT_AN_IMAGE, image_bytes

SMALL = ImageBudget(min_pixels=32 * 32, max_pixels=128 * 128)
# The random model writes noise: open the length and punctuation guards.
OPEN_GUARDS = CaptionGuards(min_words=0, max_words=10_000, require_final_punctuation=False)


def config(path, **kw) -> TransformersCaptionerConfig:
    options = dict(
        model_path=str(path),
        model_id="tiny-qwen3-vl",
        image=SMALL,
        batch_size=2,
        do_sample=False,
        sampling=CaptionSampling(max_tokens=8),
    )
    options.update(kw)
    return TransformersCaptionerConfig(**options)


def _captioner(path) -> TransformersCaptioner:
    from prx_data.models.captioning.transformers_backend import TransformersCaptioner

    captioner = make_captioner(config(path))
    assert isinstance(captioner, TransformersCaptioner)
    return captioner


def test_prompt_is_the_real_chat_template_with_an_image_slot(tiny_vlm_dir):
    captioner = _captioner(tiny_vlm_dir)
    text = captioner.render_prompt()
    assert text.startswith(f"<|im_start|>system\n{SYSTEM_PROMPT}<|im_end|>\n<|im_start|>user\n")
    assert f"<|vision_start|><|image_pad|><|vision_end|>{USER_PROMPT}<|im_end|>" in text
    assert text.endswith("<|im_start|>assistant\n")


def test_runs_the_image_path_and_returns_text(tiny_vlm_dir):
    from prx_data.models.captioning.images import load_for_captioning

    captioner = _captioner(tiny_vlm_dir)
    images = [
        load_for_captioning(image_bytes(c, size), SMALL) for c, size in (("red", (200, 100)), ("blue", (40, 90)), ("green", (64, 64)))
    ]
    raw = captioner.generate_raw(images)  # one padded batch of different image sizes
    assert len(raw) == 3
    for text, finish in raw:
        assert isinstance(text, str) and finish in ("stop", "length")


def test_bad_images_are_per_row_errors(tiny_vlm_dir):
    captioner = make_captioner(config(tiny_vlm_dir, guards=OPEN_GUARDS))
    images = [image_bytes("red", (200, 100)), NOT_AN_IMAGE, image_bytes("green", (64, 64), "JPEG")]
    results = captioner.caption_images(images)
    assert captioner.model_id == "tiny-qwen3-vl"
    assert results[1].error is not None
    assert error_code(results[1].error) == CaptionErrorCode.BAD_IMAGE
    # The good rows went through the model: random text, which stops at eos or is cut at
    # max_tokens (flagged truncated even with open guards).
    for r in (results[0], results[2]):
        assert isinstance(r.caption, str) or error_code(r.error or "") in ("truncated", "empty")


def test_default_guards_never_pass_random_text_as_a_caption(tiny_vlm_dir):
    captioner = make_captioner(config(tiny_vlm_dir))
    results = captioner.caption_images([image_bytes("red"), image_bytes("blue")])
    assert all(r.caption is None and r.error for r in results)
