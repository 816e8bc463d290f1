"""Ablation views: a declarative file that names another cut of the corpus (docs/views.md).

A view is ``<views dir>/<name>.yaml``; the default cut is the view ``default`` and has no file.
Validation is pydantic's, and every error names the file and the field. What a view file may
say is checked in two steps: the file alone (``load_view``: shape, names, the ``where``
predicate's syntax, no re-admitted opt-out) and against the corpus (``check_view``: unknown
sources, labels and buckets warn naming the known ones; a ``where`` column that no included
source's rows have is an error).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from prx_data.core.storage import locate, try_read_bytes
from prx_data.curation.view_where import PredicateError, parse_predicate
from prx_data.export.tree import BUCKET_RE, VIEW_NAME_RE, view_record_path

DEFAULT_VIEW = "default"
DEDUP_REASON = "dedup"
OPTOUT_PREFIX = "optout:"
LABEL_PREFIX = "label:"
VIEW_REASON_PREFIX = "view:"
# The reasons a view adds, one per rule, so a view's counts say which rule excluded a sample.
RULE_REASONS = {
    "sources": "view:source",
    "tiers": "view:tier",
    "buckets": "view:bucket",
    "min_caption_words": "view:min_caption_words",
    "max_caption_words": "view:max_caption_words",
    "where": "view:where",
}
SUFFIXES = (".yaml", ".yml")
RECORD_FORMAT = "prx-view-build"
RECORD_VERSION = 1


class ViewError(ValueError):
    """A view file that cannot be used; the message names the file (and the field)."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ViewRules(_Model):
    """What a view leaves out beyond the default cut's rules."""

    sources: list[str] = Field(default_factory=list)
    tiers: list[int] = Field(default_factory=list)
    buckets: list[str] = Field(default_factory=list)  # '<tier>/<HxW>' or '<HxW>' (every tier)
    labels: list[str] = Field(default_factory=list)
    min_caption_words: int | None = Field(None, ge=0)
    max_caption_words: int | None = Field(None, ge=0)
    dedup_radius: int | None = Field(None, ge=0, le=32)
    where: str | None = None

    @field_validator("buckets")
    @classmethod
    def _buckets(cls, value: list[str]) -> list[str]:
        for bucket in value:
            parts = bucket.split("/")
            if len(parts) > 2 or not BUCKET_RE.fullmatch(parts[-1]) or (len(parts) == 2 and not parts[0].isdigit()):
                raise ValueError(f"bucket {bucket!r} is not '<tier>/<height>x<width>' or '<height>x<width>'")
        return value

    @field_validator("where")
    @classmethod
    def _where(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                parse_predicate(value)
            except PredicateError as exc:
                raise ValueError(f"predicate does not parse: {exc}") from None
        return value

    @model_validator(mode="after")
    def _caption_range(self) -> ViewRules:
        low, high = self.min_caption_words, self.max_caption_words
        if low is not None and high is not None and high < low:
            raise ValueError(f"max_caption_words ({high}) is below min_caption_words ({low})")
        return self


class ViewFile(_Model):
    name: str
    description: str = ""
    # Default exclusions this view does not apply: 'dedup' or 'label:<label>'; never an opt-out.
    readmit: list[str] = Field(default_factory=list)
    exclude: ViewRules = Field(default_factory=ViewRules)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not VIEW_NAME_RE.fullmatch(value):
            raise ValueError("lowercase letters, digits, '-', '_' only (at most 64)")
        if value == DEFAULT_VIEW:
            raise ValueError(f"{DEFAULT_VIEW!r} is the default cut's name: it needs no file")
        return value

    @field_validator("readmit")
    @classmethod
    def _readmit(cls, value: list[str]) -> list[str]:
        for reason in value:
            if reason.startswith(OPTOUT_PREFIX):
                raise ValueError(f"{reason!r}: a view can never re-admit an opted-out sample")
            if reason != DEDUP_REASON and not (reason.startswith(LABEL_PREFIX) and len(reason) > len(LABEL_PREFIX)):
                raise ValueError(f"{reason!r}: only '{DEDUP_REASON}' or '{LABEL_PREFIX}<label>' can be re-admitted")
        return value


@dataclass(frozen=True)
class View:
    name: str
    path: str
    spec: ViewFile
    sha256: str  # of the file's bytes: a build records it, so an edited file reads as stale

    @property
    def readmit_dedup(self) -> bool:
        return DEDUP_REASON in self.spec.readmit

    def labels(self, default_labels: Iterable[str]) -> tuple[str, ...]:
        """The labels this view excludes: the default ones it does not re-admit, plus its own."""
        readmitted = {r.removeprefix(LABEL_PREFIX) for r in self.spec.readmit if r.startswith(LABEL_PREFIX)}
        return tuple(sorted((set(default_labels) - readmitted) | set(self.spec.exclude.labels)))


def _why(error: ValidationError) -> str:
    parts = []
    for problem in error.errors():
        where = ".".join(str(p) for p in problem["loc"]) or "(file)"
        message = problem["msg"].removeprefix("Value error, ")
        if problem["type"] == "extra_forbidden":
            message = "unknown field"
        parts.append(f"field {where!r}: {message}")
    return "; ".join(parts)


def load_view(path: str | Path) -> View:
    """One view file, validated alone; ``ViewError`` names the file and the field."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ViewError(f"view file {path}: cannot be read ({exc.strerror or exc})") from None
    try:
        raw = yaml.safe_load(data)
    except yaml.YAMLError as exc:
        raise ViewError(f"view file {path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(raw, dict):
        raise ViewError(f"view file {path}: expected a mapping of fields, found {type(raw).__name__}")
    try:
        spec = ViewFile.model_validate(raw)
    except ValidationError as exc:
        raise ViewError(f"view file {path}: {_why(exc)}") from None
    if spec.name != path.stem:
        raise ViewError(f"view file {path}: field 'name': {spec.name!r} differs from the file name {path.stem!r}")
    return View(spec.name, str(path), spec, hashlib.sha256(data).hexdigest())


@dataclass
class ViewSet:
    views: dict[str, View] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)  # file path -> why it is not used


def view_files(folder: str | Path) -> list[Path]:
    root = Path(folder)
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_file() and p.suffix in SUFFIXES and not p.name.startswith("."))


def load_views(folder: str | Path) -> ViewSet:
    """Every view file of ``folder`` (absent: none); a bad file is in ``errors``, the rest load."""
    found = ViewSet()
    by_stem: dict[str, list[Path]] = {}
    for path in view_files(folder):
        by_stem.setdefault(path.stem, []).append(path)
    for stem, paths in sorted(by_stem.items()):
        if len(paths) > 1:
            for path in paths:
                others = ", ".join(p.name for p in paths if p != path)
                found.errors[str(path)] = f"view file {path}: field 'name': view {stem!r} is also defined by {others}"
            continue
        try:
            view = load_view(paths[0])
        except ViewError as exc:
            found.errors[str(paths[0])] = str(exc)
            continue
        found.views[view.name] = view
    return found


def find_view(folder: str | Path, name: str) -> View:
    """The view ``name`` of ``folder``; ``ViewError`` when it is absent or bad."""
    views = load_views(folder)
    if name in views.views:
        return views.views[name]
    for path, why in views.errors.items():
        if Path(path).stem == name:
            raise ViewError(why)
    known = ", ".join(sorted(views.views)) or "none"
    raise ViewError(f"no view named {name!r} in {folder} (views: {known})")


def check_view(
    view: View, *, sources: Iterable[str], labels: Iterable[str], buckets: Iterable[str], columns: dict[str, set[str]]
) -> list[str]:
    """Warnings for names the corpus does not know (each naming the known ones); ``ViewError``
    for a ``where`` column that no included source's rows have. ``buckets``: '<tier>/<HxW>';
    ``columns``: source -> its row columns."""
    rules = view.spec.exclude
    sources, labels, buckets = sorted(set(sources)), sorted(set(labels)), sorted(set(buckets))
    warnings = []

    def unknown(field_name: str, given: Iterable[str], known: list[str]) -> None:
        missing = sorted(set(given) - set(known))
        if missing:
            warnings.append(
                f"view file {view.path}: field {field_name!r}: {', '.join(map(repr, missing))} not in the corpus "
                f"(known: {', '.join(known) or 'none'})"
            )

    unknown("exclude.sources", rules.sources, sources)
    readmit_labels = [r.removeprefix(LABEL_PREFIX) for r in view.spec.readmit if r.startswith(LABEL_PREFIX)]
    unknown("exclude.labels", rules.labels, labels)
    unknown("readmit", readmit_labels, labels)
    shapes = {b.split("/", 1)[1] for b in buckets}
    unknown("exclude.buckets", [b for b in rules.buckets if "/" in b], buckets)
    unknown("exclude.buckets", [b for b in rules.buckets if "/" not in b], sorted(shapes))
    tiers = sorted({b.split("/", 1)[0] for b in buckets}, key=int)
    unknown("exclude.tiers", [str(t) for t in rules.tiers], tiers)
    if rules.where is not None:
        included = [s for s in sources if s not in rules.sources]
        have = set().union(*(columns.get(s, set()) for s in included)) if included else set()
        missing = sorted(parse_predicate(rules.where).columns - have)
        if missing:
            raise ViewError(
                f"view file {view.path}: field 'exclude.where': unknown column(s) {', '.join(map(repr, missing))} "
                f"(columns: {', '.join(sorted(have)) or 'none'})"
            )
    return warnings


def read_record(mds_root: str, name: str, options: dict | None = None) -> dict | None:
    """A view's build record (``view_build.write_record``), or None when it was never built."""
    data = try_read_bytes(locate(view_record_path(mds_root, name), options))
    return None if data is None else json.loads(data)


__all__ = [
    "DEFAULT_VIEW",
    "RULE_REASONS",
    "View",
    "ViewError",
    "ViewFile",
    "ViewRules",
    "ViewSet",
    "check_view",
    "find_view",
    "load_view",
    "load_views",
    "read_record",
]
