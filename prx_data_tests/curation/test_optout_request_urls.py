"""A request naming a blank URL is refused when read, with the field named, instead of crashing
later while its keyed hashes are stored (``url_key`` has no hash for a blank URL)."""

import pytest
from pydantic import ValidationError

from prx_data.core.urls import URL_KEY_PREFIX, url_key
from prx_data.curation.optout.requests import OptOutRequest, load_request, stored_request_json


@pytest.mark.parametrize("blank", ["", "   ", "\n"])
def test_a_blank_url_is_refused(blank):
    with pytest.raises(ValidationError, match="a URL is blank"):
        OptOutRequest(id="req-1", urls=["https://example.org/a.jpg", blank])


def test_a_request_file_with_a_blank_url_names_the_field(tmp_path):
    path = tmp_path / "req-1.yaml"
    path.write_text("id: req-1\nurls:\n  - https://example.org/a.jpg\n  - ''\n")
    with pytest.raises(ValueError, match=r"req-1.yaml: field 'urls': .*a URL is blank"):
        load_request(path)


def test_urls_are_stored_as_their_keyed_hashes():
    key = b"k" * 32
    request = OptOutRequest(id="req-1", urls=["https://example.org/a.jpg"])
    stored = OptOutRequest.model_validate_json(stored_request_json(request, key))
    expected = url_key("https://example.org/a.jpg", key)
    assert expected is not None
    assert stored.urls == [URL_KEY_PREFIX + expected]
