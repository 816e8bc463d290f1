"""A small OpenAI-compatible chat-completions server on 127.0.0.1 for tests.

It speaks just enough of the protocol (POST /v1/chat/completions, JSON in and out) and can
fail its first N requests, answer chosen requests with a 4xx, or reply per request. It is a
route on the shared test server (prx_data_tests.http_fixtures).
"""

from __future__ import annotations

import base64
import io
import threading
from collections.abc import Callable

from PIL import Image

from prx_data_tests.http_fixtures import HTTPTestServer, Request, Response, free_port, json_response

__all__ = ["FakeChatServer", "describe_colour", "dominant_colour", "free_port", "good_caption", "request_image"]

Reply = Callable[[dict], "tuple[str, str]"]
COMPLETIONS = "/v1/chat/completions"


def request_image(body: dict) -> Image.Image | None:
    """The image of a captioning request (decoded from its data URL), if any."""
    for message in body.get("messages", []):
        content = message.get("content")
        if not isinstance(content, list):
            continue
        for part in content:
            if part.get("type") == "image_url":
                url = part["image_url"]["url"]
                data = base64.b64decode(url.split(",", 1)[1])
                return Image.open(io.BytesIO(data)).convert("RGB")
    return None


def dominant_colour(image: Image.Image) -> str:
    r, g, b = image.convert("RGB").resize((1, 1)).getpixel((0, 0))  # type: ignore[misc]
    return max((("red", r), ("green", g), ("blue", b)), key=lambda kv: kv[1])[0]


def good_caption(colour: str = "grey") -> str:
    sentence = (
        f"A plain {colour} square fills the whole frame from the left edge to the right edge, "
        "with an even matte surface and no visible texture or objects in the foreground. "
    )
    return (sentence * 5).strip()


def describe_colour(body: dict) -> tuple[str, str]:
    image = request_image(body)
    return good_caption(dominant_colour(image) if image else "grey"), "stop"


class FakeChatServer:
    def __init__(
        self,
        reply: Reply = describe_colour,
        *,
        fail_first: int = 0,
        fail_status: int = 503,
        fail_headers: dict[str, str] | None = None,
        status_for: Callable[[dict], int | None] | None = None,
    ) -> None:
        self.reply = reply
        self.fail_first = fail_first
        self.fail_status = fail_status
        self.fail_headers = dict(fail_headers or {})
        self.status_for = status_for
        self.requests: list[dict] = []
        self.responses: list[int] = []
        self._lock = threading.Lock()
        self.http = HTTPTestServer()
        self.http.add_route(COMPLETIONS, self._complete)

    @property
    def base_url(self) -> str:
        return self.http.url("/v1")

    def __enter__(self) -> FakeChatServer:
        self.http.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.http.close()

    def _complete(self, request: Request) -> Response:
        if request.method != "POST":
            return self._send(405, {"error": {"message": "POST only"}})
        body = request.json()
        with self._lock:
            self.requests.append(body)
            n = len(self.requests)
        if n <= self.fail_first:
            return self._send(self.fail_status, {"error": {"message": "warming up"}}, self.fail_headers)
        status = self.status_for(body) if self.status_for else None
        if status is not None:
            return self._send(status, {"error": {"message": "rejected by test"}})
        text, finish = self.reply(body)
        return self._send(
            200,
            {
                "id": f"chatcmpl-{n}",
                "object": "chat.completion",
                "model": body.get("model"),
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}],
            },
        )

    def _send(self, status: int, payload: dict, headers: dict[str, str] | None = None) -> Response:
        with self._lock:
            self.responses.append(status)
        return json_response(payload, status, headers)
