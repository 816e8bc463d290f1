"""The label prompt for text-only LLM classifiers (Qwen3-8B), its version, and answer parsing.

The version is a hash of everything that decides the answer (prompt wording and the label set),
so an edit re-labels the rows labelled under the old wording.
"""

from __future__ import annotations

import functools
import hashlib
import string

from prx_data.schema import LABELS

LABEL_RULES = """\
nsfw: the image shows nudity, sexual activity or sexually explicit content, or graphic \
violence, gore or dead bodies.
text: the image is mainly text or a document: a page, a scanned document, a receipt or form, a \
screenshot of a website or app, a presentation slide, a spreadsheet or table, a chart or \
diagram made of labels, or a poster, flyer or meme dominated by words.
visual: everything else: photographs, paintings, illustrations and renders of people, animals, \
places, objects and scenes, including ones with some text in them (a logo, a shop sign, a \
product label, a watermark).

If nsfw applies, answer nsfw even when text applies too."""

SYSTEM_PROMPT = (
    "You sort the captions of a text-to-image training set. You read only the caption of an "
    "image, never the image itself. Answer with exactly one word: visual, text or nsfw.\n\n"
    + LABEL_RULES
)

USER_TEMPLATE = "Caption: {caption}\n\nLabel:"


@functools.cache
def label_prompt_version() -> str:
    """A hash of everything the prompt says: an edit relabels the rows made with the old one."""
    return "l-" + hashlib.sha256("\x00".join([SYSTEM_PROMPT, USER_TEMPLATE, *LABELS]).encode()).hexdigest()[:12]


def label_messages(caption: str) -> list[dict]:
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": USER_TEMPLATE.format(caption=caption)},
    ]


_STRIP = string.whitespace + string.punctuation + "“”‘’"


def parse_label(text: str | None) -> str | None:
    """The label in a model's answer, or None when it is not one of LABELS.

    Constrained decoding makes the answer exact; this also accepts "Text." or "visual\\n" from
    servers or models that ignore the constraint, but never guesses from longer prose.
    """
    if text is None:
        return None
    words = text.strip(_STRIP).lower().split()
    if len(words) != 1:
        return None
    word = words[0].strip(_STRIP)
    return word if word in LABELS else None
