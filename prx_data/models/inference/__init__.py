"""What every model stage shares, below captioning and labeling (plain modules, no Dagster).

- ``backend``: :class:`ModelBackend` (one batch of rows in, one typed :class:`ModelResult` per
  row out, ``close()``), :class:`BackendUnavailable`, the reason codes every backend writes
- ``factory``: :class:`BackendFactory`, the typed config (discriminated by ``backend``) -> backend
- ``columns``: :class:`DerivedColumns` (value, model, version, error) and results as Arrow
- ``vlm``: a VLM task (request, placeholder, judgement); ``chat_backend``: any task on an
  OpenAI-compatible server; ``chat_http``: its client
- ``vllm_engine``: the vLLM-on-Ray-Data path and its H200 settings; ``vllm_backend``: any task on it
- ``gpu_env``: the vLLM workers' Ray runtime_env (``gpu_worker/*.txt`` package data);
  ``stage_timings``: Ray Data's per-operator timings of a run

Nothing is imported here, so importing the package costs nothing and never pulls in torch.
"""
