"""The captioning prompt and its version.

The version is a hash of the prompt text, so any edit to the wording bumps it and the
resumability check (:func:`prx_data.captioning.resume.needs_caption`) re-captions the rows made
with the old wording. Do not hand-maintain a version number here.
"""

from __future__ import annotations

import hashlib

SYSTEM_PROMPT = """\
You write captions for a dataset used to train a text-to-image model.

Describe the image in one paragraph of 100 to 200 words. Be purely descriptive: say only what \
is visible. Do not interpret, guess intentions or emotions, use metaphors, judge quality, or \
mention that this is an image, a photo or a caption.

Cover, in this order: the main subject or subjects; their positions in the frame (left, right, \
centre, foreground, background) and relative to each other; shapes, materials, textures and \
colours; the setting and the background; the lighting; and the kind of image (photograph, \
illustration, 3D render, painting, screenshot, diagram) with its framing and camera angle.

If the image contains any text, transcribe it verbatim inside double quotes, keeping its \
spelling and capitalisation, and say where it appears. When the text is an overlay added on \
top of the picture (a watermark, a logo, a caption, a subtitle, a price tag graphic) rather \
than part of the scene, say that it is an overlay.

Write plain prose: no lists, no headings, no line breaks. End with a full stop."""

USER_PROMPT = "Describe this image."

CAPTION_PROMPT_VERSION = "p-" + hashlib.sha256(
    f"{SYSTEM_PROMPT}\x00{USER_PROMPT}".encode()
).hexdigest()[:12]


def caption_messages(image_url: str) -> list[dict]:
    """OpenAI-format chat messages for one image given as a URL (usually a ``data:`` URL).

    The image comes before the instruction, as in Qwen-VL's own examples; the same messages
    go to vLLM (Ray Data LLM) and to an OpenAI-compatible server.
    """
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": image_url}},
                {"type": "text", "text": USER_PROMPT},
            ],
        },
    ]
