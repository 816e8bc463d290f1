"""The ``openai`` backend: an OpenAI-compatible chat-completions server (``vllm serve``).

The request and the judgement are the caption task's (:class:`CaptionTask`), the same as for
the vLLM-on-Ray backend; only the transport differs."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from prx_data.models.captioning.base import BaseCaptioner, CaptionResult, CaptionRow
from prx_data.models.captioning.chat_http import LazyChatClient
from prx_data.models.captioning.config import OpenAICaptionerConfig
from prx_data.models.captioning.prompt import caption_prompt_version
from prx_data.models.captioning.task import CaptionTask
from prx_data.models.captioning.vlm import PrepError


class OpenAICaptioner(LazyChatClient, BaseCaptioner):
    @property
    def prompt_version(self) -> str:
        return caption_prompt_version()

    def __init__(self, config: OpenAICaptionerConfig) -> None:
        self.config = config
        self.model_id = config.model_id or config.server.model
        self.task = CaptionTask(self.model_id, sampling=config.sampling, image=config.image, guards=config.guards)

    def _body(self, image: bytes | None) -> dict | CaptionResult:
        cfg = self.config
        try:
            req = self.task.request({"image": image})
        except PrepError as exc:  # undecodable bytes are this row's problem only
            return CaptionResult(error=exc.code)
        return {"messages": req.messages, **cfg.sampling.openai_params(), **cfg.extra_body}

    def caption_batch(self, rows: Sequence[CaptionRow]) -> list[CaptionResult]:
        # Decoding and resizing release the GIL, so threads keep a busy server fed.
        workers = max(1, min(self.config.server.max_concurrency, len(rows)))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            prepared = list(pool.map(self._body, [row.get("image") for row in rows]))
        bodies = [p if isinstance(p, dict) else None for p in prepared]
        replies = self._client.complete_many(bodies)
        results = []
        for early, reply in zip(prepared, replies):
            if isinstance(early, CaptionResult):
                results.append(early)
                continue
            assert reply is not None, "complete_many answers every body"
            if reply.error is not None:
                results.append(CaptionResult(error=reply.error))
            else:
                judged = self.task.judge(reply.text, reply.finish_reason)
                results.append(CaptionResult(caption=judged.value, error=judged.error))
        return results
