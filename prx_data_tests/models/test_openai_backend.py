from __future__ import annotations

import time
from datetime import UTC
from typing import Any

import pytest

from prx_data.core.reasons import reason_code
from prx_data.models.captioning.config import OpenAICaptionerConfig
from prx_data.models.captioning.factory import make_captioner
from prx_data.models.captioning.images import ImageBudget
from prx_data.models.captioning.prompt import SYSTEM_PROMPT, caption_prompt_version
from prx_data.models.inference.backend import BackendUnavailable
from prx_data.models.inference.chat_http import ChatServerConfig
from prx_data_tests.models.fake_openai import (
    FakeChatServer,
    dominant_colour,
    free_port,
    request_image,
)
from prx_data_tests.models.images import NOT_AN_IMAGE, image_bytes

BUDGET = ImageBudget(min_pixels=64 * 64, max_pixels=128 * 128)


def make(base_url: str, **server) -> Any:
    options = {"max_retries": 3, "backoff_initial_s": 0.01, "backoff_max_s": 0.05, "timeout_s": 5}
    options.update(server)
    return make_captioner(OpenAICaptionerConfig(server=ChatServerConfig(base_url=base_url, model="qwen3-vl", **options), image=BUDGET))


def test_captions_images_through_the_protocol():
    colours = ["red", "green", "blue", "red"]
    with FakeChatServer() as server, make(server.base_url, max_concurrency=2) as captioner:
        results = captioner.caption_images([image_bytes(c, (300, 200)) for c in colours])
    assert captioner.model_id == "qwen3-vl"
    assert captioner.version == caption_prompt_version()
    assert all(r.ok for r in results)
    # Each reply describes the image the server decoded from that row's data URL, in order.
    assert [r.caption.split()[2] for r in results] == colours
    body = server.requests[0]
    assert body["model"] == "qwen3-vl"
    assert body["messages"][0]["content"] == [{"type": "text", "text": SYSTEM_PROMPT}]
    assert body["presence_penalty"] == 1.5  # repetition loops end truncated without it
    assert body["max_tokens"] == 512 and body["top_k"] == 20
    image = request_image(body)
    assert image is not None
    assert BUDGET.min_pixels <= image.width * image.height <= BUDGET.max_pixels


def test_flaky_server_is_retried_until_it_answers():
    with FakeChatServer(fail_first=3) as server, make(server.base_url, max_concurrency=1) as c:
        results = c.caption_images([image_bytes("red"), image_bytes("blue")])
    assert all(r.ok for r in results)
    assert server.responses[:3] == [503, 503, 503]
    assert len(server.requests) == 5


def test_retry_after_as_an_http_date_is_honoured():
    from datetime import datetime, timedelta
    from email.utils import format_datetime

    when = format_datetime(datetime.now(UTC) + timedelta(seconds=2), usegmt=True)
    started = time.monotonic()
    with (
        FakeChatServer(fail_first=1, fail_status=429, fail_headers={"Retry-After": when}) as server,
        make(server.base_url, max_concurrency=1, backoff_max_s=5.0) as c,
    ):
        results = c.caption_images([image_bytes("red")])
    # Whole-second dates: "in 2 s" is 1 to 2 s away; the backoff alone is 10 ms.
    assert results[0].ok and server.responses == [429, 200]
    assert 0.9 <= time.monotonic() - started < 10


def test_client_errors_are_per_row_and_not_retried():
    def reject_green(body):
        image = request_image(body)
        return 400 if image is not None and dominant_colour(image) == "green" else None

    with FakeChatServer(status_for=reject_green) as server, make(server.base_url) as captioner:
        results = captioner.caption_images([image_bytes("red"), image_bytes("green"), NOT_AN_IMAGE])
    assert results[0].ok
    assert reason_code(results[1].error) == "http_error"
    assert "400" in results[1].error and "rejected by test" in results[1].error
    assert reason_code(results[2].error) == "bad_image"
    assert len(server.requests) == 2  # no retry of the 400, no request for the bad image


def test_quality_guards_apply_to_server_replies():
    replies = iter([("I'm sorry, I can't describe this.", "stop"), ("A red", "length")])
    with FakeChatServer(reply=lambda body: next(replies)) as server:
        with make(server.base_url, max_concurrency=1) as captioner:
            results = captioner.caption_images([image_bytes(), image_bytes()])
    assert [reason_code(r.error) for r in results] == ["refusal", "truncated"]


def test_server_that_stays_down_raises_backend_unavailable():
    with FakeChatServer(fail_first=10**9) as server, make(server.base_url) as captioner:
        with pytest.raises(BackendUnavailable, match="still failing after 4 attempts"):
            captioner.caption_images([image_bytes()] * 3)


def test_nothing_listening_raises_backend_unavailable_quickly():
    url = f"http://127.0.0.1:{free_port()}/v1"
    start = time.monotonic()
    with make(url) as captioner, pytest.raises(BackendUnavailable, match="connection error"):
        captioner.caption_images([image_bytes()] * 8)
    assert time.monotonic() - start < 5


def test_wrong_url_or_model_fails_the_batch_not_each_row():
    with FakeChatServer(status_for=lambda body: 404) as server, make(server.base_url) as captioner:
        with pytest.raises(BackendUnavailable, match="HTTP 404.*check base_url"):
            captioner.caption_images([image_bytes()] * 3)
    assert set(server.responses) == {404}


def test_captioner_pickles_for_ray_workers_after_use():
    import pickle

    with FakeChatServer() as server, make(server.base_url) as captioner:
        captioner.caption_images([image_bytes()])
        clone = pickle.loads(pickle.dumps(captioner))
        assert clone.caption_images([image_bytes("blue")])[0].caption.split()[2] == "blue"
        clone.close()
