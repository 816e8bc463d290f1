"""The Ray ``runtime_env`` of the workers that run vLLM, and the check that an environment can.

vLLM (transformers 5) cannot live in the Dagster code location's environment (mosaicml-streaming
caps transformers < 5), so the vLLM stages (multimodal prepare, chat template, tokenize, engine)
run in their own environment (``deployments/gpu-worker/requirements.txt``), chosen by ``mode``:

- ``none`` (default): the workers that run the stages already are that environment: the KubeRay
  GPU worker group built from the baked image ``deployments/gpu-worker/Dockerfile``. With
  ``node_resource`` set, the stages only go to nodes that advertise that custom resource.
- ``python``: an interpreter of that environment present on every node that runs the stages
  (Ray's ``py_executable``): the baked image's ``/opt/gpu-env/bin/python`` beside another
  default Python, or the CPU test environment of ``scripts/vllm_cpu_env.sh``.
- ``image``: a container image that holds it (``image_uri``; the nodes need podman).
- ``pip``: Ray builds a virtualenv from the requirements on every node the first time. Slow
  (~4 GB per node, past Ray's setup timeout on a slow index) and needs the package index: only
  for a single box that cannot use the image.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# Packaged with prx_data (package data), so mode 'pip' works from an installed wheel. The source
# of truth is deployments/gpu-worker/ (the image build reads it); a test keeps the copies equal.
DEFAULT_REQUIREMENTS = resources.files("prx_data.models.inference") / "gpu_worker" / "requirements.txt"

# Propagated from the driver when set there; the defaults keep workers off the model hub, which
# must never be reached at run time (models come from a local path or object storage).
PROPAGATED_ENV: dict[str, str | None] = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_HOME": None}


class WorkerEnv(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    mode: Literal["none", "python", "image", "pip"] = "none"
    python: str | None = Field(None, description="mode 'python': the environment's interpreter")
    requirements_path: str | None = Field(
        None, description="mode 'pip': requirements file; defaults to the packaged copy of deployments/gpu-worker/requirements.txt"
    )
    image_uri: str | None = None
    # A custom Ray resource the nodes holding the environment advertise (e.g. rayStartParams
    # resources '{"prx_vllm": 1000}'): the vLLM stages ask for a sliver of it, so Ray Data never
    # puts a tokenizer or multimodal actor on a node without vLLM.
    node_resource: str | None = None
    env_vars: dict[str, str] = Field(default_factory=dict)


def read_requirements(path) -> list[str]:
    """Requirement lines of ``path`` (a path or a package resource), with ``-r other.txt``
    includes expanded (relative to it)."""
    path = Path(path) if isinstance(path, (str, os.PathLike)) else path
    lines = []
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith(("-r ", "--requirement ")):
            lines.extend(read_requirements(path.parent / line.split(None, 1)[1]))
        else:
            lines.append(line)
    return lines


def worker_env_vars(extra: dict[str, str] | None = None, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    source = os.environ if environ is None else environ
    env: dict[str, str] = {}
    for name, default in PROPAGATED_ENV.items():
        value = source.get(name, default)
        if value is not None:
            env[name] = value
    env.update(extra or {})
    return env


def gpu_runtime_env(config: WorkerEnv, environ: dict | None = None) -> dict[str, Any]:
    """The ``runtime_env`` for the vLLM stages."""
    # Env vars in every mode: workers started by a cluster do not see the driver's.
    env_vars = worker_env_vars(config.env_vars, environ)
    if config.mode == "none":
        return {"env_vars": env_vars}
    if config.mode == "python":
        if not config.python:
            raise ValueError("WorkerEnv(mode='python') needs python (the environment's interpreter)")
        return {"py_executable": config.python, "env_vars": env_vars}
    if config.mode == "image":
        if not config.image_uri:
            raise ValueError("WorkerEnv(mode='image') needs image_uri")
        return {"image_uri": config.image_uri, "env_vars": env_vars}
    path = Path(config.requirements_path) if config.requirements_path else DEFAULT_REQUIREMENTS
    if not path.is_file():
        raise FileNotFoundError(
            f"GPU worker requirements not found at {path}; set WorkerEnv.requirements_path, "
            "or use the worker image (see deployments/gpu-worker/README.md)"
        )
    # pip_check off: the GPU env deliberately disagrees with the base env's pins (transformers).
    return {
        "pip": {"packages": read_requirements(path), "pip_check": False},
        "env_vars": env_vars,
    }


def stage_resources(config: WorkerEnv) -> dict[str, float]:
    """Extra Ray resources each vLLM stage actor asks for (see ``WorkerEnv.node_resource``)."""
    return {config.node_resource: 0.001} if config.node_resource else {}


# What the vLLM stages import, each with the reason it is needed: an environment that lacks one
# fails deep inside a Ray actor, minutes into a run.
REQUIRED_IMPORTS = {
    "vllm": "the engine",
    "vllm.entrypoints.chat_utils": "Ray 2.60's multimodal stage (removed in vLLM 0.32: pin vllm==0.29.0)",
    "vllm.v1.metrics.ray_wrappers": "the engine's Ray metrics logger",
    "ray.serve": "vLLM's Ray metrics logger (install ray[data,serve]==2.60.0)",
    "ray.data.llm": "the Ray Data LLM processor",
    "transformers": "chat template and tokenizer stages",
    "lance": "image reads from the Lance table (install pylance)",
    "PIL": "image preparation",
}


def gpu_environment_problems(*, require_gpu: bool = True) -> list[str]:
    """Why this environment cannot run the vLLM stages (empty when it can): one line per missing
    import, naming it and what needs it, and whether a CUDA GPU is visible."""
    problems = []
    for module, why in REQUIRED_IMPORTS.items():
        try:
            importlib.import_module(module)
        except Exception as exc:  # ImportError, or a broken CUDA build failing at import
            problems.append(f"cannot import {module} ({type(exc).__name__}: {exc}); needed by {why}")
    if require_gpu:
        try:
            import torch

            if not torch.cuda.is_available():
                problems.append(
                    "no CUDA GPU is visible to torch (torch.cuda.is_available() is False); PyPI's "
                    "torch for vLLM 0.29 is a CUDA 13 build: the host needs NVIDIA driver 580+"
                )
        except Exception as exc:
            problems.append(f"cannot import torch ({type(exc).__name__}: {exc})")
    return problems


def main(argv: list[str] | None = None) -> int:
    """``python -m prx_data.models.inference.gpu_env [--cpu]``: print the problems, exit 1 if any."""
    import sys

    argv = sys.argv[1:] if argv is None else argv
    problems = gpu_environment_problems(require_gpu="--cpu" not in argv)
    for line in problems:
        print(f"MISSING: {line}")
    if not problems:
        import ray
        import vllm

        print(f"ok: vllm {vllm.__version__}, ray {ray.__version__}")
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
