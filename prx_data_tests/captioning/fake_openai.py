"""A small OpenAI-compatible chat-completions server on 127.0.0.1 for tests.

It speaks just enough of the protocol (POST /v1/chat/completions, JSON in and out) and can
fail its first N requests, answer chosen requests with a 4xx, or reply per request.
"""

from __future__ import annotations

import base64
import io
import json
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from PIL import Image

Reply = Callable[[dict], "tuple[str, str]"]


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
    r, g, b = image.resize((1, 1)).getpixel((0, 0))
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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class FakeChatServer:
    def __init__(
        self,
        reply: Reply = describe_colour,
        *,
        fail_first: int = 0,
        fail_status: int = 503,
        status_for: Callable[[dict], int | None] | None = None,
    ) -> None:
        self.reply = reply
        self.fail_first = fail_first
        self.fail_status = fail_status
        self.status_for = status_for
        self.requests: list[dict] = []
        self.responses: list[int] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> "FakeChatServer":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with fake._lock:
                    fake.requests.append(body)
                    n = len(fake.requests)
                if self.path != "/v1/chat/completions":
                    return self._send(404, {"error": {"message": "not found"}})
                if n <= fake.fail_first:
                    return self._send(fake.fail_status, {"error": {"message": "warming up"}})
                status = fake.status_for(body) if fake.status_for else None
                if status is not None:
                    return self._send(status, {"error": {"message": "rejected by test"}})
                text, finish = fake.reply(body)
                self._send(
                    200,
                    {
                        "id": f"chatcmpl-{n}",
                        "object": "chat.completion",
                        "model": body.get("model"),
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": text},
                                "finish_reason": finish,
                            }
                        ],
                    },
                )

            def _send(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                with fake._lock:
                    fake.responses.append(status)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler
