"""The captioner a config names (:class:`~prx_data.models.inference.factory.BackendFactory`).

Choosing ``source`` never imports torch, Ray or httpx; nothing here imports vLLM (it only exists
in the GPU workers' environment). For ``vllm`` the captioner also streams a Ray Dataset
(``run_dataset``), the path real runs take.
"""

from __future__ import annotations

from prx_data.models.captioning.base import BaseCaptioner
from prx_data.models.captioning.config import (
    CaptionerConfig,
    OpenAICaptionerConfig,
    SourceCaptionerConfig,
    TransformersCaptionerConfig,
    VLLMCaptionerConfig,
)
from prx_data.models.inference.factory import BackendFactory

CAPTIONERS: BackendFactory[CaptionerConfig, BaseCaptioner] = BackendFactory(
    "captioner",
    CaptionerConfig,
    __package__,
    {
        SourceCaptionerConfig: ".source:SourceCaptioner",
        OpenAICaptionerConfig: ".openai_backend:OpenAICaptioner",
        TransformersCaptionerConfig: ".transformers_backend:TransformersCaptioner",
        VLLMCaptionerConfig: ".vllm_ray:VLLMCaptioner",
    },
)
parse_captioner_config = CAPTIONERS.parse
make_captioner = CAPTIONERS.make
