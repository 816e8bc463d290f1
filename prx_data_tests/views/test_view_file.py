"""The view file and its ``where`` language, alone: what parses, what is refused, and that a
predicate is data, never code."""

from __future__ import annotations

import pyarrow as pa
import pytest

from prx_data.curation.view_where import PredicateError, parse_predicate
from prx_data.curation.views import ViewError, load_view, load_views

ROWS = pa.table({"width": [100, 800, None, 2000], "license": ["cc0", "x", None, "cc-by"], "flag": [True, False, None, True]})


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("width >= 768", [800, 2000]),
        ("width < 768 OR license IN ('cc-by')", [100, 2000]),
        ("NOT (width IS NULL) AND license != 'x'", [100, 2000]),
        ("license NOT IN ('x', 'cc0')", [2000]),
        ("flag = TRUE and width > 1.5", [100, 2000]),
        ("license IS NULL", [None]),
    ],
)
def test_predicates_filter_rows_and_null_is_not_kept(text, kept):
    assert ROWS.filter(parse_predicate(text).expression)["width"].to_pylist() == kept


@pytest.mark.parametrize(
    "text",
    ["width >", "width >= 3 extra", "__import__('os').system('true')", 'width = "x"', "width >> 3", "(width > 1", "NOT IN (1)", ""],
)
def test_anything_else_is_refused_as_a_parse_error(text):
    with pytest.raises(PredicateError):
        parse_predicate(text)


def test_columns_are_reported_for_the_corpus_check():
    assert parse_predicate("width > 1 and (license = 'x' or height is null)").columns == {"width", "license", "height"}


def test_view_files_name_file_and_field(tmp_path):
    (tmp_path / "a.yaml").write_text("name: a\nreadmit: [superseded]\n")
    (tmp_path / "b.yaml").write_text("name: b\nexclude: {min_caption_words: 9, max_caption_words: 3}\n")
    (tmp_path / "c.yml").write_text("name: c\n")
    (tmp_path / "c.yaml").write_text("name: c\n")
    (tmp_path / "default.yaml").write_text("name: default\n")
    (tmp_path / "ok.yaml").write_text(
        "name: ok\nreadmit: [dedup, 'label:text']\nexclude: {buckets: ['1024/768x1344', 512x512], tiers: [4096]}\n"
    )
    found = load_views(tmp_path)
    assert sorted(found.views) == ["ok"]
    errors = found.errors
    assert "field 'readmit': 'superseded': only 'dedup' or 'label:<label>'" in errors[str(tmp_path / "a.yaml")]
    assert "max_caption_words (3) is below min_caption_words (9)" in errors[str(tmp_path / "b.yaml")]
    assert "view 'c' is also defined by c.yml" in errors[str(tmp_path / "c.yaml")]
    assert "'default' is the default cut's name" in errors[str(tmp_path / "default.yaml")]
    view = load_view(tmp_path / "ok.yaml")
    assert view.readmit_dedup and view.labels(("nsfw", "text")) == ("nsfw",)
    with pytest.raises(ViewError, match=r"bad\.yaml: field 'exclude\.buckets': bucket '768-1344'"):
        (tmp_path / "bad.yaml").write_text("name: bad\nexclude: {buckets: ['768-1344']}\n")
        load_view(tmp_path / "bad.yaml")
