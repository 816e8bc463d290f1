"""Any :class:`VLMTask` on an OpenAI-compatible chat-completions server (``vllm serve``): the
``openai`` backend of every model stage. The request and the judgement are the task's, the same
as on the vLLM-on-Ray backend; only the transport differs. A row the task cannot ask (an
undecodable image, no caption) gets the task's error and sends no request."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, ClassVar

from prx_data.models.inference.backend import ModelBackend, R, Row
from prx_data.models.inference.chat_http import LazyChatClient
from prx_data.models.inference.vlm import PrepError, VLMTask


class ChatTaskBackend(LazyChatClient, ModelBackend[R]):
    task: VLMTask
    # The stage's result class (its ``of(value, error)`` builds one).
    result_type: ClassVar[Any]
    # Requests built in threads (decoding and resizing images release the GIL, so threads keep
    # a busy server fed); off, built in order (text requests cost microseconds).
    prepare_in_threads: ClassVar[bool] = False

    @abstractmethod
    def body_params(self) -> dict[str, Any]:
        """What each request's body holds besides its messages (sampling, constraints, extras)."""

    def _body(self, row: Row) -> dict[str, Any] | R:
        try:
            request = self.task.request(row)
        except PrepError as exc:  # this row's problem only
            return self.result_type.of(error=exc.code)
        return {"messages": request.messages, **self.body_params()}

    def run_batch(self, rows: Sequence[Row]) -> list[R]:
        if self.prepare_in_threads:
            workers = max(1, min(self.config.server.max_concurrency, len(rows)))  # type: ignore[attr-defined]
            with ThreadPoolExecutor(max_workers=workers) as pool:
                prepared = list(pool.map(self._body, rows))
        else:
            prepared = [self._body(row) for row in rows]
        bodies = [p if isinstance(p, dict) else None for p in prepared]
        results: list[R] = []
        for early, reply in zip(prepared, self._client.complete_many(bodies)):
            if not isinstance(early, dict):
                results.append(early)
                continue
            assert reply is not None, "complete_many answers every body"
            if reply.error is not None:
                results.append(self.result_type.of(error=reply.error))
            else:
                judged = self.task.judge(reply.text, reply.finish_reason)
                results.append(self.result_type.of(judged.value, judged.error))
        return results


__all__ = ["ChatTaskBackend"]
