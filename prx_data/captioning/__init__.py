"""Captioning backends as plain modules (no Dagster): Ray workers import them.

- ``base``: :class:`Captioner` protocol, :class:`CaptionResult`, reason codes,
  ``BackendUnavailable``
- ``config``: one pydantic config per backend, discriminated by ``backend``
- ``factory``: ``make_captioner(config)``
- ``source`` / ``openai_backend`` / ``transformers_backend`` / ``vllm_ray``: the backends
- ``prompt``: the prompt and ``CAPTION_PROMPT_VERSION``; ``quality``: the guards
- ``images``: pixel budget and data URLs; ``chat_http``: OpenAI-compatible client
- ``resume``: ``needs_caption``; ``columns``: results as ``CAPTION_COLUMNS``
- ``gpu_env``: the GPU workers' Ray runtime_env

Nothing is imported here, so importing the package costs nothing and never pulls in torch.
"""
