from __future__ import annotations

import pytest

from prx_data.core.reasons import reason_code
from prx_data.models.captioning import prompt
from prx_data.models.captioning.base import CaptionResult
from prx_data.models.captioning.quality import CaptionGuards, judge_caption, judge_source_caption
from prx_data_tests.models.fake_openai import good_caption

GOOD = good_caption("red")  # 125 words, ends with a full stop


def test_prompt_asks_for_what_the_recipe_needs():
    text = prompt.SYSTEM_PROMPT.lower()
    for needle in (
        "one paragraph",
        "100 to 200 words",
        "descriptive",
        "metaphor",
        "verbatim",
        "overlay",
        "colours",
        "materials",
        "positions",
    ):
        assert needle in text, needle


def test_prompt_asks_for_the_medium_without_forbidding_it():
    """The medium (photograph, illustration...) is asked for; what is forbidden is opening with
    "The image shows" -- not naming the kind of image."""
    text = prompt.SYSTEM_PROMPT.lower()
    assert "medium (photograph" in text and "the image shows" in text
    assert "mention that this is an image, a photo" not in text


def test_prompt_version_is_a_hash_of_the_wording():
    import hashlib

    def version(system: str, user: str) -> str:
        return "p-" + hashlib.sha256(f"{system}\x00{user}".encode()).hexdigest()[:12]

    assert prompt.caption_prompt_version().startswith("p-")
    assert version(prompt.SYSTEM_PROMPT, prompt.USER_PROMPT) == prompt.caption_prompt_version()
    assert version(prompt.SYSTEM_PROMPT + ".", prompt.USER_PROMPT) != prompt.caption_prompt_version()


def test_messages_put_the_image_before_the_instruction():
    messages = prompt.caption_messages("data:image/jpeg;base64,AAAA")
    assert messages[0] == {"role": "system", "content": [{"type": "text", "text": prompt.SYSTEM_PROMPT}]}
    parts = messages[1]["content"]
    assert parts[0] == {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,AAAA"}}
    assert parts[1] == {"type": "text", "text": prompt.USER_PROMPT}


def test_good_caption_passes_and_is_normalized_to_one_paragraph():
    result = judge_caption(GOOD.replace(". ", ".\n\n", 2), finish_reason="stop")
    assert result == CaptionResult(caption=GOOD)


@pytest.mark.parametrize(
    ("raw", "finish", "code"),
    [
        (None, None, "empty"),
        ("   \n ", "stop", "empty"),
        ("I'm sorry, but I can't help with describing this image.", "stop", "refusal"),
        ("I’m sorry, I cannot do that.", "stop", "refusal"),  # curly apostrophe
        ("As an AI language model, I cannot see images. " + GOOD, "stop", "refusal"),
        (GOOD, "length", "truncated"),  # the engine says it hit max_tokens
        (GOOD.rstrip(".") + " and a", "stop", "truncated"),  # stops mid-sentence
        ("A red square.", "stop", "too_short"),
        (" ".join([GOOD] * 4), "stop", "too_long"),
    ],
)
def test_bad_outputs_are_flagged_never_silently_good(raw, finish, code):
    result = judge_caption(raw, finish_reason=finish)
    assert result.caption is None
    assert result.error is not None
    assert reason_code(result.error) == code


def test_quoted_refusal_words_inside_a_caption_are_fine():
    text = 'A shop door with a sign that reads "I\'m sorry, we are closed" in red letters. ' + GOOD
    assert judge_caption(text).ok


def test_guards_are_configurable():
    relaxed = CaptionGuards(min_words=1, require_final_punctuation=False)
    assert judge_caption("A red square", guards=relaxed).caption == "A red square"
    assert (judge_caption("A red square", guards=relaxed, finish_reason="length").error or "").startswith("truncated")


def test_closing_quote_after_the_full_stop_counts_as_an_ending():
    text = GOOD + ' A sign reads "OPEN."'
    assert judge_caption(text).ok


def test_source_captions_skip_the_length_guard_but_not_presence():
    assert judge_source_caption("a cat") == CaptionResult(caption="a cat")
    assert judge_source_caption(None).error == "no_source_caption"
    assert judge_source_caption("  ").error == "empty"


def test_a_result_has_exactly_one_of_caption_and_error():
    with pytest.raises(ValueError):
        CaptionResult()
    with pytest.raises(ValueError):
        CaptionResult(caption="x", error="y")
