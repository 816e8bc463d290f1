"""Source registry: one YAML spec per source, validated with pydantic.

A bad spec yields a :class:`SpecError` naming the file and the field; it never hides the other,
valid specs.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

SourceShape = Literal["image_folder", "parquet", "jsonl", "webdataset", "lance"]
ImageKind = Literal["bytes", "path", "url"]

_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_\-]{0,62}$")


class FieldMap(BaseModel):
    """Which fields of a metadata record hold what. Unused for image folders."""

    model_config = ConfigDict(extra="forbid")

    key: str | None = Field(None, description="Field with the item's unique key in the source.")
    image: str | None = Field(None, description="Field holding the image (bytes, a path or a URL).")
    image_kind: ImageKind = "bytes"
    caption: str | None = None
    license: str | None = None
    url: str | None = Field(None, description="Field with the item's public URL (for lineage).")
    embedding: str | None = None


class DownloadConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    concurrency: int = Field(32, ge=1, le=1024)
    per_host: int = Field(4, ge=1, le=256)
    timeout_s: float = Field(10.0, gt=0)
    retries: int = Field(2, ge=0, le=10)
    backoff_s: float = Field(0.5, ge=0)
    max_bytes: int = Field(32 * 1024 * 1024, gt=0)
    user_agent: str = "prx-data/0.1 (+https://github.com/prx-data)"


class SourceSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="Partition key and table name: lowercase, digits, '-', '_'.")
    shape: SourceShape
    location: str = Field(description="Folder, file or glob; relative to the spec's folder.")
    fields: FieldMap = Field(default_factory=FieldMap)
    license: str | None = Field(None, description="License for rows whose record names none.")
    priority: int = Field(0, description="Higher wins when deduplicating across sources.")
    embedding_dim: int | None = Field(None, gt=0)
    max_pixels: int = Field(100_000_000, gt=0, description="Decompression-bomb guard.")
    max_bytes: int = Field(64 * 1024 * 1024, gt=0, description="Largest image file accepted.")
    download: DownloadConfig = Field(default_factory=DownloadConfig)
    enabled: bool = True
    description: str | None = None

    @field_validator("name")
    @classmethod
    def _name_is_a_key(cls, value: str) -> str:
        if not _NAME_RE.match(value):
            raise ValueError(
                "must be 1-63 chars of lowercase letters, digits, '-' or '_', starting with a "
                "letter or digit"
            )
        return value

    @model_validator(mode="after")
    def _fields_fit_shape(self) -> "SourceSpec":
        if self.shape in ("parquet", "jsonl", "lance"):
            if not self.fields.image:
                raise ValueError(f"fields.image is required for shape {self.shape!r}")
        if self.fields.embedding and not self.embedding_dim:
            raise ValueError("embedding_dim is required when fields.embedding is set")
        return self


@dataclass
class RegisteredSource:
    spec: SourceSpec
    path: Path

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def fingerprint(self) -> str:
        """Changes whenever the spec's meaning changes; drives re-runs from the sensor."""
        payload = json.dumps(self.spec.model_dump(mode="json"), sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    def resolve_location(self) -> Path:
        loc = Path(self.spec.location).expanduser()
        return loc if loc.is_absolute() else (self.path.parent / loc)


@dataclass
class SpecError:
    path: Path
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


@dataclass
class Registry:
    sources: dict[str, RegisteredSource] = field(default_factory=dict)
    errors: list[SpecError] = field(default_factory=list)

    def get(self, name: str) -> RegisteredSource:
        try:
            return self.sources[name]
        except KeyError:
            detail = "".join(f"\n  {e}" for e in self.errors)
            raise KeyError(f"no valid source spec named {name!r}{detail}") from None


def _format_validation_error(err: ValidationError) -> str:
    parts = []
    for item in err.errors():
        loc = ".".join(str(p) for p in item["loc"]) or "(spec)"
        parts.append(f"field '{loc}': {item['msg']}")
    return "; ".join(parts)


def load_spec(path: Path) -> SourceSpec:
    """Parse one spec; raises ValueError with the file and field in the message."""
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ValueError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: a spec must be a mapping, got {type(raw).__name__}")
    try:
        return SourceSpec.model_validate(raw)
    except ValidationError as exc:
        raise ValueError(f"{path}: {_format_validation_error(exc)}") from exc


def load_registry(sources_dir: str | Path) -> Registry:
    registry = Registry()
    folder = Path(sources_dir)
    if not folder.exists():
        return registry
    for path in sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")]):
        try:
            spec = load_spec(path)
        except ValueError as exc:
            registry.errors.append(SpecError(path, str(exc).removeprefix(f"{path}: ")))
            continue
        if not spec.enabled:
            continue
        if spec.name in registry.sources:
            other = registry.sources[spec.name].path
            registry.errors.append(SpecError(path, f"field 'name': {spec.name!r} already defined in {other}"))
            continue
        registry.sources[spec.name] = RegisteredSource(spec, path)
    return registry
