"""Captioning backends as plain modules (no Dagster): Ray workers import them.

- ``base``: :class:`Captioner` protocol, :class:`CaptionResult`, reason codes,
  ``BackendUnavailable``
- ``config``: one pydantic config per backend, discriminated by ``backend``
- ``factory``: ``make_captioner(config)``
- ``source`` / ``openai_backend`` / ``transformers_backend`` / ``vllm_ray``: the backends
- ``prompt``: the prompt and ``caption_prompt_version()``; ``quality``: the guards
- ``images``: pixel budget and data URLs; ``chat_http``: OpenAI-compatible client
- ``vlm``: the task abstraction captions and labels share; ``task``: the caption tasks;
  ``vllm_engine``: the shared vLLM-on-Ray path and its H200 settings
- ``resume``: the column names a VLM stage writes; ``columns``: results as ``CAPTION_COLUMNS``
- ``gpu_env``: the GPU workers' Ray runtime_env

Nothing is imported here, so importing the package costs nothing and never pulls in torch.
"""
