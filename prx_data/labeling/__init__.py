"""Caption-label classifiers (visual / text / nsfw) as plain modules (no Dagster).

- ``base``: :class:`Classifier` protocol, :class:`LabelResult`, reason codes
- ``config`` / ``factory``: one config per backend, ``make_classifier(config)``
- ``minilm`` (CPU default), ``openai_backend``, ``vllm_ray`` (Qwen3-8B on Ray GPU workers)
- ``prompt``: the LLM label prompt, ``LABEL_PROMPT_VERSION``, ``parse_label``
- ``resume``: ``needs_label``; ``columns``: results as ``LABEL_COLUMNS``
"""
