"""The caption stage's models, as plain modules (no Dagster): Ray workers import them. The
engine pieces every model stage shares are in :mod:`prx_data.models.inference`.

- ``base``: :class:`BaseCaptioner`, :class:`CaptionResult`, reason codes
- ``config``: one pydantic config per backend, discriminated by ``backend``; ``factory``: ``CAPTIONERS``
- ``source`` / ``openai_backend`` / ``transformers_backend`` / ``vllm_ray``: the backends
- ``prompt``: the prompt and ``caption_prompt_version()``; ``quality``: the guards
- ``images``: pixel budget and data URLs; ``fp8_vision``: FP8 beside a bf16 vision tower
- ``task``: the caption and fused caption + label tasks; ``caption_columns``: results as ``CAPTION_COLUMNS``

Nothing is imported here, so importing the package costs nothing and never pulls in torch.
"""
