"""Reason strings: ``"<code>"`` or ``"<code>: <detail>"``, as written to ``caption_error``,
``drop_reason`` and skip reasons. Counting and filtering go by the code; the detail (an
exception text, a word count) is for a person reading one row."""

from __future__ import annotations

# The detail lands in a table column once per row: kept short.
DETAIL_MAX = 200


def with_detail(code: str, detail: object | None = None) -> str:
    """``code`` or ``"code: detail"`` with the detail on one line and at most DETAIL_MAX chars."""
    if detail is None or str(detail) == "":
        return code
    text = " ".join(str(detail).split())
    if len(text) > DETAIL_MAX:
        text = text[: DETAIL_MAX - 3] + "..."
    return f"{code}: {text}"


def reason_code(reason: str) -> str:
    """The code of a reason string (what precedes the first ``:``), e.g. for counting by kind."""
    return reason.split(":", 1)[0]
