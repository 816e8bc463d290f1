"""The Ray ``runtime_env`` of the GPU workers that run vLLM.

vLLM (transformers 5) cannot live in the Dagster code location's environment (mosaicml-streaming
caps transformers < 5), so the vLLM stages run in their own environment, either
- ``pip``: a Ray runtime_env built from ``deployments/gpu-worker/requirements.txt``;
- ``image``: a container image that already holds that environment (``image_uri``);
- ``none``: the current environment already is the GPU environment (a benchmark run from
  inside it, or a KubeRay GPU worker group whose image has it).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

DEFAULT_REQUIREMENTS = (
    Path(__file__).resolve().parents[2] / "deployments" / "gpu-worker" / "requirements.txt"
)

# Propagated from the driver when set there; the defaults keep workers off the model hub, which
# must never be reached at run time (models come from a local path or object storage).
PROPAGATED_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HOME": None}


class WorkerEnv(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    mode: Literal["pip", "image", "none"] = "pip"
    requirements_path: str | None = Field(
        None, description="pip requirements file; defaults to deployments/gpu-worker/"
    )
    image_uri: str | None = None
    env_vars: dict[str, str] = Field(default_factory=dict)


def read_requirements(path: str | os.PathLike) -> list[str]:
    lines = []
    for raw in Path(path).read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            lines.append(line)
    return lines


def worker_env_vars(extra: dict[str, str] | None = None, environ: dict | None = None) -> dict:
    environ = os.environ if environ is None else environ
    env = {}
    for name, default in PROPAGATED_ENV.items():
        value = environ.get(name, default)
        if value is not None:
            env[name] = value
    env.update(extra or {})
    return env


def gpu_runtime_env(config: WorkerEnv, environ: dict | None = None) -> dict[str, Any]:
    """The ``runtime_env`` for the vLLM stages (env vars only in mode ``none``)."""
    env_vars = worker_env_vars(config.env_vars, environ)
    if config.mode == "none":
        # Still worth passing env vars: workers started by a cluster do not see the driver's.
        return {"env_vars": env_vars}
    if config.mode == "image":
        if not config.image_uri:
            raise ValueError("WorkerEnv(mode='image') needs image_uri")
        return {"image_uri": config.image_uri, "env_vars": env_vars}
    path = Path(config.requirements_path) if config.requirements_path else DEFAULT_REQUIREMENTS
    if not path.is_file():
        raise FileNotFoundError(
            f"GPU worker requirements not found at {path}; set WorkerEnv.requirements_path, "
            "or use mode='image' with a worker image (see deployments/gpu-worker/README.md)"
        )
    # pip_check off: the GPU env deliberately disagrees with the base env's pins (transformers).
    return {
        "pip": {"packages": read_requirements(path), "pip_check": False},
        "env_vars": env_vars,
    }


def gpu_environment_problems() -> list[str]:
    """Why this process cannot run the vLLM stages itself (empty when it can).

    For scripts that run vLLM in the current environment (benchmarks, ``mode='none'``): they
    should stop with these reasons rather than fail deep inside a Ray actor.
    """
    problems = []
    try:
        import vllm  # noqa: F401
    except Exception as exc:  # ImportError, or a broken CUDA build failing at import
        problems.append(
            f"vLLM is not importable here ({type(exc).__name__}: {exc}). Run from the GPU worker "
            "environment: pip install -r deployments/gpu-worker/requirements.txt in a separate venv"
        )
    try:
        import torch

        if not torch.cuda.is_available():
            problems.append("no CUDA GPU is visible to torch (torch.cuda.is_available() is False)")
    except Exception as exc:
        problems.append(f"torch is not importable ({type(exc).__name__}: {exc})")
    return problems
