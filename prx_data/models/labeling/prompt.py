"""The label prompt for text-only LLM classifiers (Qwen3-8B), its version, and answer parsing.

The version is a hash of everything that decides the answer (prompt wording and the label set),
so an edit re-labels the rows labelled under the old wording.
"""

from __future__ import annotations

import functools
import hashlib
import string

from prx_data.core.schema import LABELS
from prx_data.models.label_rules import LABEL_RULES

SYSTEM_PROMPT = (
    "You sort the captions of a text-to-image training set. You read only the caption of an "
    "image, never the image itself. Answer with exactly one word: visual, text or nsfw.\n\n" + LABEL_RULES
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
