"""The label stage's models (visual / text / nsfw from the caption) as plain modules (no Dagster).

- ``base``: :class:`BaseClassifier`, :class:`LabelResult`, reason codes
- ``config`` / ``factory``: one config per backend, ``CLASSIFIERS``
- ``minilm`` (CPU default, ``bert_numpy`` its numpy forward pass), ``openai_backend``,
  ``vllm_ray`` (Qwen3-8B on Ray GPU workers), ``fused`` (no model: the captioner's labels)
- ``prompt``: the LLM label prompt, ``label_prompt_version()``, ``parse_label``
- ``task``: the label task of the shared VLM path; ``label_columns``: results as ``LABEL_COLUMNS``
"""
