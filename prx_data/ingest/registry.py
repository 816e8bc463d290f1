"""Source registry: one YAML spec per source, validated with pydantic.

A bad spec yields a :class:`SpecError` naming the file and the field; it never hides the other,
valid specs.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

if TYPE_CHECKING:
    from prx_data.ingest.ownership import Claim

SourceShape = Literal["image_folder", "parquet", "jsonl", "webdataset", "lance"]
ImageKind = Literal["bytes", "path", "url"]

# Accepted at ingest unless a spec narrows or widens the list (names as Pillow reports them).
DEFAULT_FORMATS = ("JPEG", "PNG", "WEBP", "AVIF", "GIF", "TIFF", "BMP")
# Every format a spec may allow: the decoder's own allow-list (imaging/decode.py).
SUPPORTED_FORMATS = (*DEFAULT_FORMATS, "ICO", "PPM", "TGA")
_FORMAT_ALIASES = {"JPG": "JPEG", "TIF": "TIFF"}

_OBJECT_SCHEMES = ("s3://", "gs://")
# fullmatch, never match with "$": "$" also matches before a final newline ("web\n", which
# ``name: |`` gives), a name no path, partition or filter can hold.
_NAME_RE = re.compile(r"[a-z0-9][a-z0-9_\-]{0,62}")


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
    caption_language: str | None = Field(
        None,
        description="When captions are mappings of language to text ({'en': ..., 'de': ...}), "
        "the key to take. Without it a mapping caption is an invalid_record row.",
    )
    positional_keys: bool = Field(
        False,
        description="Tabular sources without a key column: key rows by file and position. Keys "
        "then change when rows move, so every moved row is re-ingested; prefer fields.key.",
    )


class DownloadConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Defaults and their reasons: docs/downloads.md.
    concurrency: int = Field(128, ge=1, le=1024, description="Requests in flight per worker process.")
    per_host: int = Field(
        64,
        ge=1,
        le=256,
        description="Requests in flight to one host per worker process; halved on each 429/503, "
        "the host paused for its Retry-After, one slot back per that many answers.",
    )
    timeout_s: float = Field(10.0, gt=0)
    retries: int = Field(2, ge=0, le=10)
    backoff_s: float = Field(0.5, ge=0)
    max_bytes: int = Field(32 * 1024 * 1024, gt=0)
    deadline_s: float = Field(60.0, gt=0, description="Whole download (redirects and retries included).")
    allow_networks: list[str] = Field(
        default_factory=list,
        description="Networks (CIDR) exempt from the private-address refusal, e.g. 127.0.0.1/32 "
        "for a test server. Empty by default: loopback, private, link-local, multicast, "
        "reserved and unspecified addresses are never fetched.",
    )
    user_agent: str = "prx-data/0.1 (+https://github.com/prx-data)"

    @field_validator("allow_networks")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        for net in value:
            try:
                ipaddress.ip_network(net, strict=False)
            except ValueError as exc:
                raise ValueError(f"{net!r} is not a network: {exc}") from None
        return value


class CheckThresholds(BaseModel):
    """What the per-source asset checks accept. A source that is known to be noisy (a scraped URL
    list with dead links, alt texts instead of captions) says so here, so its checks stay green
    while it is as expected and fail with the reason when it gets worse."""

    model_config = ConfigDict(extra="forbid")

    max_error_share: float = Field(0.10, ge=0, le=1, description="Rows that failed to ingest.")
    min_caption_coverage: float = Field(0.95, ge=0, le=1, description="Usable rows with a caption.")
    max_caption_length_outliers: float = Field(0.05, ge=0, le=1, description="Captions outside 2..300 words.")


_ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
# Spec keys that would hold a credential itself: a spec file is committed and shared, so these
# are refused with a pointer to the *_env field that names a variable instead.
_SECRET_WORDS = ("secret", "password", "token", "access_key", "key_id", "credential")


class StorageProfile(BaseModel):
    """How to reach an object-store ``location``: names of environment variables, never values.

    Without a profile a source uses the settings the roots use (PRX_S3_ENDPOINT, AWS_*). With
    one, each ``*_env`` field names the variable the run's (and workers') environment holds."""

    model_config = ConfigDict(extra="forbid")

    endpoint_env: str | None = Field(None, description="Variable holding the endpoint URL (like PRX_S3_ENDPOINT).")
    access_key_id_env: str | None = None
    secret_access_key_env: str | None = None
    session_token_env: str | None = None
    region_env: str | None = None
    region: str | None = Field(None, description="A region name (not a secret), when no variable holds it.")

    @model_validator(mode="before")
    @classmethod
    def _no_literal_secrets(cls, value):
        if isinstance(value, dict):
            for name in value:
                lowered = str(name).lower()
                if not lowered.endswith("_env") and any(word in lowered for word in _SECRET_WORDS):
                    raise ValueError(
                        f"'{name}' would put a credential in the spec file; secrets never go in a spec. "
                        "Name the environment variable that holds it instead (e.g. "
                        "secret_access_key_env: MY_STORE_SECRET)"
                    )
        return value

    @field_validator("endpoint_env", "access_key_id_env", "secret_access_key_env", "session_token_env", "region_env")
    @classmethod
    def _variable_name(cls, value: str | None) -> str | None:
        if value is not None and not _ENV_NAME_RE.fullmatch(value):
            # Also catches a secret pasted where a variable's name belongs.
            raise ValueError("must be the name of an environment variable (letters, digits, '_'), not a value")
        return value

    def variables(self) -> list[str]:
        return [
            v for v in (self.endpoint_env, self.access_key_id_env, self.secret_access_key_env, self.session_token_env, self.region_env) if v
        ]


class SourceSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="Partition key and table name: lowercase, digits, '-', '_'.")
    shape: SourceShape
    location: str = Field(
        description="Folder, file or glob; relative to the spec's folder, or an object-store "
        "URI (s3://bucket/prefix/..., globs too) read by the ingest workers themselves."
    )
    storage: StorageProfile | None = Field(
        None,
        description="Environment variables with the object-store credentials for this source; "
        "default: the roots' settings (PRX_S3_ENDPOINT, AWS_*).",
    )
    fields: FieldMap = Field(default_factory=FieldMap)
    license: str | None = Field(None, description="License for rows whose record names none.")
    priority: int = Field(0, description="Higher wins when deduplicating across sources.")
    embedding_dim: int | None = Field(None, gt=0)
    max_pixels: int = Field(100_000_000, gt=0, description="Decompression-bomb guard.")
    max_bytes: int = Field(64 * 1024 * 1024, gt=0, description="Largest image file accepted.")
    download: DownloadConfig = Field(default_factory=DownloadConfig)
    root: str | None = Field(
        None,
        description="Folder every path the source names must stay inside (image files, "
        "image_kind: path, sidecars, symlink targets). Defaults to the location's folder; set it "
        "to widen containment explicitly (relative to the spec's folder).",
    )
    formats: list[str] = Field(
        default_factory=lambda: list(DEFAULT_FORMATS),
        description="Image formats accepted at ingest, from the decoded header (not the name).",
    )
    allow_empty: bool = Field(
        False,
        description="Accept a run that finds no items where rows existed (deleting them). "
        "Without it such a run fails and keeps the last good table (a vanished mount).",
    )
    workers: int = Field(
        1,
        ge=1,
        le=1024,
        description="Input units (files, tar shards, Parquet row-group runs, folder batches) read "
        "at once at ingest. 1 reads them one after another in the run's process; more runs them "
        "as Ray tasks on the run's Ray, one CPU each.",
    )
    reread_unchanged: bool = Field(
        False,
        description="Open every input object on every run, even those whose signature (ETag and "
        "size on S3, size and mtime on disk) matches the last run's: for stores whose mtimes "
        "cannot be trusted. Default: only added and edited objects are read.",
    )
    enabled: bool = True
    description: str | None = None
    checks: CheckThresholds = Field(default_factory=CheckThresholds)

    @field_validator("name")
    @classmethod
    def _name_is_a_key(cls, value: str) -> str:
        if not _NAME_RE.fullmatch(value):
            raise ValueError("must be 1-63 chars of lowercase letters, digits, '-' or '_', starting with a letter or digit")
        return value

    @field_validator("formats")
    @classmethod
    def _known_formats(cls, value: list[str]) -> list[str]:
        names = [_FORMAT_ALIASES.get(v.upper(), v.upper()) for v in value]
        unknown = sorted(set(names) - set(SUPPORTED_FORMATS))
        if unknown:
            raise ValueError(f"unknown format(s) {unknown}; choose from {list(SUPPORTED_FORMATS)}")
        if not names:
            raise ValueError("at least one format is needed")
        return list(dict.fromkeys(names))

    @model_validator(mode="after")
    def _fields_fit_shape(self) -> SourceSpec:
        if self.shape in ("parquet", "jsonl", "lance"):
            if not self.fields.image:
                raise ValueError(f"fields.image is required for shape {self.shape!r}")
            if not self.fields.key and not self.fields.positional_keys:
                raise ValueError(
                    f"fields.key is required for shape {self.shape!r} (the column holding each "
                    "item's stable key); set fields.positional_keys: true to key rows by position"
                )
        if self.fields.embedding and not self.embedding_dim:
            raise ValueError("embedding_dim is required when fields.embedding is set")
        remote = _is_uri(self.location)
        if remote and not self.location.startswith(_OBJECT_SCHEMES):
            raise ValueError(f"location {self.location!r}: only {', '.join(_OBJECT_SCHEMES)} object stores are supported")
        if self.root and remote != _is_uri(self.root):
            raise ValueError("root and location must both be local paths or both object-store URIs")
        if self.storage is not None and not remote:
            raise ValueError("storage is only for object-store locations (s3://...)")
        return self


def _is_uri(text: str) -> bool:
    return "://" in text and not text.startswith("file://")


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
        # Check thresholds change what is judged, workers and reread_unchanged how: no re-run for them.
        payload = json.dumps(self.spec.model_dump(mode="json", exclude={"checks", "workers", "reread_unchanged"}), sort_keys=True)
        return hashlib.sha256(payload.encode()).hexdigest()[:16]

    @property
    def remote(self) -> bool:
        """The location is an object-store URI (its paths are then strings, not ``Path``)."""
        return _is_uri(self.spec.location)

    def resolve_location(self) -> Path | str:
        """A local ``Path`` (made absolute against the spec's folder), or the URI as written."""
        if self.remote:
            return self.spec.location.rstrip("/") if not self.spec.location.endswith("://") else self.spec.location
        loc = Path(self.spec.location.removeprefix("file://")).expanduser()
        return loc if loc.is_absolute() else (self.path.parent / loc)

    def resolve_root(self) -> Path | str | None:
        """The spec's explicit containment root, or None for the reader's default."""
        if not self.spec.root:
            return None
        if _is_uri(self.spec.root):
            return self.spec.root.rstrip("/")
        root = Path(self.spec.root).expanduser()
        return root if root.is_absolute() else (self.path.parent / root)


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
    # Names several specs claim with no owner to tell (a table built before owners were
    # recorded): none of the claimants is taken, and the source is not a removal either.
    contested: set[str] = field(default_factory=set)

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


def load_registry(sources_dir: str | Path, owners: Callable[[str], Claim] | None = None) -> Registry:
    """Every spec in ``sources_dir``. ``owners`` (an ``ingest.ownership.SpecOwners``) tells which
    spec a built source belongs to when several claim its name; without it only the file names
    decide (for callers that build nothing)."""
    registry = Registry()
    folder = Path(sources_dir)
    if not folder.exists():
        return registry
    loaded: list[tuple[Path, SourceSpec]] = []
    for path in sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")]):
        try:
            spec = load_spec(path)
        except ValueError as exc:
            registry.errors.append(SpecError(path, str(exc).removeprefix(f"{path}: ")))
            continue
        if spec.enabled:
            loaded.append((path, spec))
    claims: dict[str, list[tuple[Path, SourceSpec]]] = {}
    for path, spec in loaded:
        claims.setdefault(spec.name, []).append((path, spec))
    for name, claimants in claims.items():
        if len(claimants) == 1:
            path, spec = claimants[0]
            registry.sources[name] = RegisteredSource(spec, path)
            continue
        owner, why = _owner(name, claimants, owners)
        if owner is None:
            files = ", ".join(str(p) for p, _ in claimants)
            registry.contested.add(name)
            for path, _ in claimants:
                registry.errors.append(SpecError(path, f"field 'name': {name!r} is claimed by {files}; {why}"))
            continue
        registry.sources[name] = RegisteredSource(owner[1], owner[0])
        for path, _ in claimants:
            if path != owner[0]:
                registry.errors.append(
                    SpecError(
                        path,
                        f"field 'name': {name!r} already defined in {owner[0]} ({why}); "
                        "this spec is ignored and that source is left as it is",
                    )
                )
    registry.sources = dict(sorted(registry.sources.items(), key=lambda item: str(item[1].path)))
    return registry


def _owner(
    name: str, claimants: list[tuple[Path, SourceSpec]], owners: Callable[[str], Claim] | None
) -> tuple[tuple[Path, SourceSpec] | None, str]:
    """Which of several specs claiming ``name`` keeps it, and why (or None and why none does).

    The spec the source's table was built from keeps it; a newcomer never takes a source over,
    however its file name sorts. Before any table exists the file named after the source
    (web.yaml for "web") wins, else the first in path order."""
    claim = owners(name) if owners is not None else None
    if claim is not None and claim.spec_file is not None:
        for path, spec in claimants:
            if path.name == claim.spec_file:
                return (path, spec), "the source's tables were built from it"
        return None, (
            f"the source's tables were built from {claim.spec_file}, which none of them is; "
            "none is taken until one is removed or renamed (the tables are left as they are)"
        )
    if claim is not None and claim.built:
        return None, (
            "the source's tables exist and do not say which spec built them; none is taken until one "
            "is removed or renamed (the tables are left as they are)"
        )
    ranked = sorted(claimants, key=lambda item: (item[0].stem != name, str(item[0])))
    path, spec = ranked[0]
    return (path, spec), ("its file is named after the source" if path.stem == name else "first in path order, nothing built yet")


def wide_root_warning(source: RegisteredSource) -> str | None:
    """A warning for a spec whose ``root:`` reaches beyond the spec's own folder: allowed (a
    shared image folder beside the specs), but said out loud, since every file under that root
    becomes readable by the source's paths (``root: /`` lets ``image_kind: path`` rows name any
    file the process can read). None when the root stays inside the spec's folder."""
    root = source.resolve_root()
    if root is None or isinstance(root, str):
        # A str root is an object-store URI: it reaches no file of this machine.
        return None
    spec_dir = source.path.parent.resolve()
    resolved = root.resolve()
    if resolved == spec_dir or resolved.is_relative_to(spec_dir):
        return None
    return (
        f"source {source.spec.name!r}: root {resolved} is wider than the spec's folder {spec_dir}; "
        "every file under it can be read by this source's paths"
    )
