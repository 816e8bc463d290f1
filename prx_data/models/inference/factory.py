"""One factory scheme for every model stage: a typed config picks the backend.

Each stage's configs are pydantic models in a union discriminated by ``backend``; the factory
validates plain data (YAML, JSON settings, Dagster run config) into one of them and builds the
backend class registered for its type. Backend modules are imported when a backend is first
built, never when a config is parsed: the code location parses configs and must not import
torch, httpx or an engine. Targets are modules of the factory's own package, named relative to
it (``".source:SourceCaptioner"``), so a factory cannot reach into another package.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, TypeAdapter

from prx_data.models.inference.backend import ModelBackend

C = TypeVar("C")
B = TypeVar("B", bound=ModelBackend)


class BackendConfig(BaseModel):
    """The base of every backend config: plain pydantic (a Dagster resource holds one as JSON,
    Ray workers receive one pickled), frozen, unknown keys refused (a typo fails at load)."""

    model_config = ConfigDict(frozen=True, extra="forbid", protected_namespaces=())


class BackendFactory(Generic[C, B]):
    def __init__(
        self,
        kind: str,
        config: Any,
        package: str,
        backends: Mapping[type, str],
        refused: Mapping[type, str] | None = None,
    ) -> None:
        """``kind``: what the backends are, for messages ("captioner"); ``config``: the
        discriminated union of the configs; ``backends``: config class -> ``".module:Class"``
        inside ``package``; ``refused``: config classes that name no backend, and why."""
        for target in backends.values():
            module = target.partition(":")[0]
            if not module.startswith(".") or module.startswith(".."):
                raise ValueError(f"{kind} backend {target!r}: name a module of {package} relative to it ('.module:Class')")
        self.kind = kind
        self.package = package
        self._adapter: TypeAdapter[C] = TypeAdapter(config)
        self._backends = dict(backends)
        self._refused = dict(refused or {})

    def parse(self, data: dict[str, Any] | C) -> C:
        """Validate a plain dict into the backend's config (a config passes through)."""
        if isinstance(data, dict):
            return self._adapter.validate_python(data)
        return data

    def backend_class(self, config_type: type) -> Callable[[Any], B]:
        if config_type in self._refused:
            raise TypeError(self._refused[config_type])
        target = self._backends.get(config_type)
        if target is None:
            raise TypeError(f"unknown {self.kind} config {config_type.__name__}")
        module, _, name = target.partition(":")
        return getattr(importlib.import_module(module, self.package), name)

    def make(self, data: dict[str, Any] | C) -> B:
        """The backend the config's ``backend`` names, built from the config (its models and
        clients load on first use or here, as each backend says)."""
        config = self.parse(data)
        return self.backend_class(type(config))(config)

    @property
    def config_types(self) -> tuple[type, ...]:
        return (*self._backends, *self._refused)


__all__ = ["BackendConfig", "BackendFactory"]
