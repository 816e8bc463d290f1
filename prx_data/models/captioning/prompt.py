"""The captioning prompt and its version.

The version is a hash of the prompt text, so any edit to the wording bumps it and the
caption stage's pending filter (``ColumnStage``) re-captions the rows made
with the old wording. Do not hand-maintain a version number here. Versions and the fused prompt
are computed on first use (cached), not at import.
"""

from __future__ import annotations

import functools
import hashlib

from prx_data.core.schema import LABELS
from prx_data.models.label_rules import LABEL_RULES

SYSTEM_PROMPT = """\
You write captions for a dataset used to train a text-to-image model.

Describe the image in one paragraph of 100 to 200 words. Be purely descriptive: say only what \
is visible. Do not interpret, guess intentions or emotions, use metaphors or judge quality. \
Start with the subject itself, not with "The image shows" or "This is a photo of", and never \
refer to the caption.

Cover, in this order: the main subject or subjects; their positions in the frame (left, right, \
centre, foreground, background) and relative to each other; shapes, materials, textures and \
colours; the setting and the background; the lighting; and last the medium (photograph, \
illustration, 3D render, painting, screenshot, diagram) with its framing and camera angle.

If the image contains any text, transcribe it verbatim inside double quotes, keeping its \
spelling and capitalisation, and say where it appears. When the text is an overlay added on \
top of the picture (a watermark, a logo, a caption, a subtitle, a price tag graphic) rather \
than part of the scene, say that it is an overlay.

Write plain prose: no lists, no headings, no line breaks. End with a full stop."""

USER_PROMPT = "Describe this image."


@functools.cache
def caption_prompt_version() -> str:
    return "p-" + hashlib.sha256(f"{SYSTEM_PROMPT}\x00{USER_PROMPT}".encode()).hexdigest()[:12]


def text_part(text: str) -> dict:
    return {"type": "text", "text": text}


def caption_messages(image_url: str | None, system: str = SYSTEM_PROMPT, user: str = USER_PROMPT) -> list[dict]:
    """OpenAI-format chat messages for one image given as a URL (usually a ``data:`` URL).

    The image comes before the instruction, as in Qwen-VL's own examples; the same messages
    go to vLLM (Ray Data LLM) and to an OpenAI-compatible server. Every content is a list of
    parts (the system prompt too), so rows keep one Arrow type between Ray stages instead of
    being pickled as objects. ``image_url=None`` leaves the image out (a placeholder request).
    """
    parts = [{"type": "image_url", "image_url": {"url": image_url}}] if image_url else []
    return [
        {"role": "system", "content": [text_part(system)]},
        {"role": "user", "content": [*parts, text_part(user)]},
    ]


# The fused request: the same caption, then the label of the text-only classifier's rules, as
# one JSON object whose shape structured output enforces (caption first, so the label is
# conditioned on it as in the separate pass).
@functools.cache
def fused_system_prompt() -> str:
    return (
        SYSTEM_PROMPT
        + "\n\nAnswer with one JSON object and nothing else: "
        + '{"caption": "<the caption>", "label": "<label>"}, where label is one of '
        + ", ".join(LABELS)
        + ", chosen by these rules:\n\n"
        + LABEL_RULES
    )


@functools.cache
def fused_prompt_version() -> str:
    return "pf-" + hashlib.sha256(f"{fused_system_prompt()}\x00{USER_PROMPT}".encode()).hexdigest()[:12]
