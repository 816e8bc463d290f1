"""The ``openai`` backend: an OpenAI-compatible chat-completions server (``vllm serve``)."""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from prx_data.captioning.base import BaseCaptioner, CaptionResult, CaptionRow, with_detail
from prx_data.captioning.base import CaptionErrorCode as E
from prx_data.captioning.chat_http import LazyChatClient
from prx_data.captioning.config import OpenAICaptionerConfig
from prx_data.captioning.images import image_data_url
from prx_data.captioning.prompt import CAPTION_PROMPT_VERSION, caption_messages
from prx_data.captioning.quality import judge_caption


class OpenAICaptioner(LazyChatClient, BaseCaptioner):
    prompt_version = CAPTION_PROMPT_VERSION

    def __init__(self, config: OpenAICaptionerConfig) -> None:
        self.config = config
        self.model_id = config.model_id or config.server.model

    def _body(self, image: bytes | None) -> dict | CaptionResult:
        cfg = self.config
        try:
            url = image_data_url(image, cfg.image)
        except Exception as exc:  # undecodable bytes are this row's problem only
            return CaptionResult(error=with_detail(E.BAD_IMAGE, repr(exc)))
        return {"messages": caption_messages(url), **cfg.sampling.openai_params(), **cfg.extra_body}

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
            elif reply.error is not None:
                results.append(CaptionResult(error=reply.error))
            else:
                guards = self.config.guards
                results.append(
                    judge_caption(reply.text, finish_reason=reply.finish_reason, guards=guards)
                )
        return results
