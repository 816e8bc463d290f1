from prx_data.core.reasons import DETAIL_MAX, reason_code, with_detail


def test_a_reason_is_its_code_and_a_short_one_line_detail():
    assert with_detail("bad_image") == "bad_image" and with_detail("bad_image", "") == "bad_image"
    reason = with_detail("decode_error", "cannot identify\n image   file " + "x" * 500)
    assert reason.startswith("decode_error: cannot identify image file x") and "\n" not in reason
    assert len(reason) == len("decode_error: ") + DETAIL_MAX and reason.endswith("...")
    assert reason_code(reason) == "decode_error" and reason_code("no_caption") == "no_caption"
    # Only the first ':' splits: a detail may hold more (a URL, a message).
    assert reason_code(with_detail("http_error", "GET http://x: 500")) == "http_error"
