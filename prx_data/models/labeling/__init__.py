"""Caption-label classifiers (visual / text / nsfw) as plain modules (no Dagster).

- ``base``: :class:`Classifier` protocol, :class:`LabelResult`, reason codes
- ``config`` / ``factory``: one config per backend, ``make_classifier(config)``
- ``minilm`` (CPU default), ``openai_backend``, ``vllm_ray`` (Qwen3-8B on Ray GPU workers)
- ``prompt``: the LLM label prompt, ``label_prompt_version()``, ``parse_label``
- ``task``: the label task of the shared VLM stage; ``columns``: results as ``LABEL_COLUMNS``
"""
