"""A small client for OpenAI-compatible chat-completions servers (``vllm serve``).

Shared by every model stage's ``openai`` backend (``chat_backend``). Failure policy, per request:
- timeouts, connection errors, 5xx, 408 and 429 are retried under ``prx_data.core.retry``'s policy
  (exponential backoff with jitter, Retry-After honoured up to ``backoff_max_s``);
- 401, 403 and 404 are the configuration's fault (key, URL, model name): every row would get
  the same answer, so :class:`BackendUnavailable` is raised at once;
- other 4xx are the row's fault (bad image, prompt too long): reported for that row, no retry;
- a request still failing after the retries means the server is down: :class:`BackendUnavailable`
  is raised for the whole batch, and the other requests of the batch stop retrying.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr

from prx_data.core.reasons import with_detail
from prx_data.core.retry import Retryable, RetryPolicy, is_retryable_error, is_retryable_status
from prx_data.models.inference.backend import BackendUnavailable
from prx_data.models.inference.backend import ErrorCode as E

if TYPE_CHECKING:
    import httpx

_CONFIG_STATUS = frozenset({401, 403, 404})


class ChatServerConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    base_url: str = Field(description="Server root including /v1, e.g. http://gpu-0:8000/v1")
    model: str = Field(description="Model name the server was started with (the request's model)")
    api_key: SecretStr | None = None
    max_concurrency: int = Field(16, ge=1)
    timeout_s: float = Field(120.0, gt=0)
    max_retries: int = Field(5, ge=0)
    backoff_initial_s: float = Field(0.5, ge=0)
    backoff_max_s: float = Field(30.0, ge=0)

    @property
    def completions_url(self) -> str:
        return self.base_url.rstrip("/") + "/chat/completions"


@dataclass(frozen=True)
class ChatReply:
    text: str | None = None
    finish_reason: str | None = None
    error: str | None = None


class _GaveUp(BackendUnavailable):
    """Stopped because another request of the batch found the server down."""


class ChatCompletionsClient:
    def __init__(self, config: ChatServerConfig) -> None:
        self.config = config
        self.policy = RetryPolicy(
            retries=config.max_retries,
            backoff_s=config.backoff_initial_s,
            max_backoff_s=config.backoff_max_s,
            max_retry_after_s=config.backoff_max_s,
        )
        # Here, not at module level: the code location imports this module for its config only,
        # and httpx pulls in rich and pygments (~60 ms of every run process's start).
        import httpx

        headers = {}
        if config.api_key is not None:
            headers["Authorization"] = f"Bearer {config.api_key.get_secret_value()}"
        self._client = httpx.Client(
            headers=headers,
            timeout=config.timeout_s,
            limits=httpx.Limits(
                max_connections=config.max_concurrency,
                max_keepalive_connections=config.max_concurrency,
            ),
        )

    def close(self) -> None:
        self._client.close()

    def complete_many(self, bodies: Sequence[dict[str, Any] | None]) -> list[ChatReply | None]:
        """Send each body (``model`` is filled in); ``None`` bodies are skipped (``None`` out).

        Raises :class:`BackendUnavailable` when any request exhausts its retries.
        """
        results: list[ChatReply | None] = [None] * len(bodies)
        todo = [i for i, body in enumerate(bodies) if body is not None]
        if not todo:
            return results
        down = threading.Event()

        def run(i: int) -> None:
            body = bodies[i]
            assert body is not None, "run only for the bodies in todo"
            results[i] = self._complete_one({"model": self.config.model, **body}, down)

        workers = min(self.config.max_concurrency, len(todo))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="chat") as pool:
            futures = [pool.submit(run, i) for i in todo]
            errors = [f.exception() for f in futures]
        # Report the request that found the server down, not the ones that followed it.
        unavailable = sorted(
            (e for e in errors if isinstance(e, BackendUnavailable)),
            key=lambda e: isinstance(e, _GaveUp),
        )
        if unavailable:
            raise unavailable[0]
        for error in errors:
            if error is not None:
                raise error
        return results

    def _complete_one(self, body: dict[str, Any], down: threading.Event) -> ChatReply:
        cfg = self.config

        def wait(seconds: float) -> None:
            # On the event, so a batch gives up at once when another request did.
            if down.wait(seconds):
                raise _GaveUp(f"{cfg.completions_url}: gave up (another request did)")

        try:
            for attempt in self.policy.retrying(sleep=wait):
                if down.is_set():
                    raise _GaveUp(f"{cfg.completions_url}: gave up (another request did)")
                with attempt:
                    return self._post(body)
        except BackendUnavailable:
            down.set()
            raise
        except Retryable as last:
            down.set()
            raise BackendUnavailable(
                f"{cfg.completions_url} still failing after {cfg.max_retries + 1} attempts "
                f"(last: {last}). Is the OpenAI-compatible server up?"
            ) from None
        raise AssertionError("the retry loop ends with a reply or an exception")

    def _post(self, body: dict[str, Any]) -> ChatReply:
        import httpx

        try:
            response = self._client.post(self.config.completions_url, json=body)
        except httpx.HTTPError as exc:
            if isinstance(exc, httpx.TimeoutException):
                raise Retryable(f"timeout: {exc!r}") from exc
            if is_retryable_error(exc):  # connection refused/reset, dropped mid-answer
                raise Retryable(f"connection error: {exc!r}") from exc
            raise BackendUnavailable(f"{self.config.completions_url}: {exc!r}") from exc
        status = response.status_code
        if is_retryable_status(status):
            raise Retryable.from_response(response)
        if status in _CONFIG_STATUS:
            raise BackendUnavailable(
                f"{self.config.completions_url} answered HTTP {status} ({_error_message(response)}): check base_url, api_key and model"
            )
        if status >= 400:
            detail = f"{status} {_error_message(response)}"
            return ChatReply(error=with_detail(E.HTTP_ERROR, detail))
        try:
            choice = response.json()["choices"][0]
            text = choice["message"]["content"]
            if text is not None and not isinstance(text, str):
                raise TypeError(f"content is {type(text).__name__}")
        except Exception as exc:  # any shape we cannot read is this reply's problem
            return ChatReply(error=with_detail(E.BAD_RESPONSE, repr(exc)))
        return ChatReply(text=text, finish_reason=choice.get("finish_reason"))


def _error_message(response: httpx.Response) -> str:
    try:
        payload = response.json()
        error = payload.get("error", payload)
        if isinstance(error, dict):
            return str(error.get("message", error))
        return str(error)
    except Exception:
        return response.text[:200]


class LazyChatClient:
    """Mixin for backends that talk to a chat-completions server (``self.config.server``): the
    client is created on first use, so the object pickles to Ray workers before it has sockets."""

    _http: ChatCompletionsClient | None = None

    @property
    def _client(self) -> ChatCompletionsClient:
        if self._http is None:
            self._http = ChatCompletionsClient(self.config.server)  # type: ignore[attr-defined]
        return self._http

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_http": None}

    def close(self) -> None:
        if self._http is not None:
            self._http.close()
            self._http = None
