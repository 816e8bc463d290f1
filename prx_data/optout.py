"""Opt-out requests: what a person or site asked to remove, and the samples that covers.

A request is a YAML or JSON file in the opt-out folder (or written by ``prx-data optout add``).
Resolution goes through the lineage tables: sample ids, source keys, URLs and domains match
rows of the source tables; image files match by perceptual hash; and every perceptual duplicate
of a matched image, in any source, is covered too. Nothing is deleted: the matches are handed to
the skip lists with reason ``optout:<request id>``.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.compute as pc
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from prx_data.ids import sample_id as make_sample_id
from prx_data.lance_io import open_table
from prx_data.paths import StoragePaths
from prx_data.schema import OPTOUT_AUDIT_SCHEMA, OPTOUT_MATCH_SCHEMA

_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,79}$")
_SAMPLE_ID_RE = re.compile(r"^[0-9a-f]{32}$")


class OptOutRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(description="Stable request id, e.g. 'req-2026-0042'.")
    requester_note: str = ""
    sample_ids: list[str] = Field(default_factory=list)
    urls: list[str] = Field(default_factory=list)
    source_keys: list[str] = Field(default_factory=list, description="'<source>:<key>' pairs.")
    image_files: list[str] = Field(default_factory=list, description="Paths, relative to the request file.")
    domains: list[str] = Field(default_factory=list, description="Every URL on these hosts (and subdomains).")
    max_hamming: int = Field(0, ge=0, le=16, description="Phash distance for image files; 0 = equal hashes.")

    @field_validator("id")
    @classmethod
    def _id_is_safe(cls, value: str) -> str:
        if not _ID_RE.match(value):
            raise ValueError("must be 1-80 chars of letters, digits, '.', '_' or '-'")
        return value

    @field_validator("sample_ids")
    @classmethod
    def _ids_look_like_ids(cls, values: list[str]) -> list[str]:
        bad = [v for v in values if not _SAMPLE_ID_RE.match(v)]
        if bad:
            raise ValueError(f"not sample ids (32 hex chars): {bad[:3]}")
        return values

    @field_validator("source_keys")
    @classmethod
    def _source_keys_have_a_source(cls, values: list[str]) -> list[str]:
        bad = [v for v in values if ":" not in v]
        if bad:
            raise ValueError(f"expected '<source>:<key>', got {bad[:3]}")
        return values

    @field_validator("domains")
    @classmethod
    def _domains_are_hosts(cls, values: list[str]) -> list[str]:
        return [v.strip().lower().lstrip(".") for v in values if v.strip()]

    def is_empty(self) -> bool:
        return not (self.sample_ids or self.urls or self.source_keys or self.image_files or self.domains)

    def fingerprint(self) -> str:
        return hashlib.sha256(json.dumps(self.model_dump(), sort_keys=True).encode()).hexdigest()[:16]


@dataclass
class LoadedRequest:
    request: OptOutRequest
    path: Path


@dataclass
class RequestSet:
    requests: dict[str, LoadedRequest] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)  # same request filed again


def load_request(path: Path) -> OptOutRequest:
    try:
        text = path.read_text()
        raw = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path}: not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {exc}") from exc
    if not isinstance(raw, dict):
        raise ValueError(f"{path}: a request must be a mapping")
    try:
        request = OptOutRequest.model_validate(raw)
    except ValidationError as exc:
        fields = "; ".join(f"field '{'.'.join(map(str, e['loc']))}': {e['msg']}" for e in exc.errors())
        raise ValueError(f"{path}: {fields}") from exc
    if request.is_empty():
        raise ValueError(f"{path}: request {request.id!r} names nothing to remove")
    return request


def load_requests(folder: str | Path) -> RequestSet:
    out = RequestSet()
    folder = Path(folder)
    if not folder.exists():
        return out
    files = sorted(p for p in folder.iterdir() if p.suffix in (".yaml", ".yml", ".json") and p.is_file())
    for path in files:
        try:
            request = load_request(path)
        except ValueError as exc:
            out.errors.append(str(exc))
            continue
        previous = out.requests.get(request.id)
        if previous is None:
            out.requests[request.id] = LoadedRequest(request, path)
        elif previous.request.fingerprint() == request.fingerprint():
            out.duplicates.append(f"{path} repeats {previous.path}")
        else:
            out.errors.append(f"{path}: request id {request.id!r} already used by {previous.path} with other content")
    return out


def write_request(folder: str | Path, request: OptOutRequest) -> Path:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{request.id}.yaml"
    if path.exists():
        existing = load_request(path)
        if existing.fingerprint() != request.fingerprint():
            raise ValueError(f"{path} exists with other content; choose another id")
        return path
    tmp = path.with_suffix(".yaml.tmp")
    tmp.write_text(yaml.safe_dump(request.model_dump(exclude_defaults=True), sort_keys=False))
    tmp.replace(path)
    return path


# Resolution ---------------------------------------------------------------------------------



def _host(url: str) -> str:
    try:
        return (urlsplit(url).hostname or "").lower()
    except ValueError:
        return ""


def corpus_rows(paths: StoragePaths, sources: list[str], options: dict | None = None) -> pa.Table:
    """sample_id, source, source_key, source_url, phash of every row of every source."""
    tables = []
    for source in sources:
        ds = open_table(paths.raw_table(source), options)
        if ds is None:
            continue
        cols = ["sample_id", "source", "source_key", "source_url"] + (["phash"] if "phash" in ds.schema.names else [])
        t = ds.to_table(columns=cols)
        if "phash" not in cols:
            t = t.append_column("phash", pa.nulls(t.num_rows, pa.int64()))
        tables.append(t)
    if not tables:
        return pa.schema([("sample_id", pa.string()), ("source", pa.string()), ("source_key", pa.string()), ("source_url", pa.string()), ("phash", pa.int64())]).empty_table()
    return pa.concat_tables(tables)


def resolve(request: OptOutRequest, corpus: pa.Table, base_dir: Path) -> tuple[pa.Table, list[str]]:
    """Matches of one request, and problems to report (unknown ids, undecodable files)."""
    from prx_data.imaging.phash import hamming, phash_bytes

    problems: list[str] = []
    ids = corpus.column("sample_id").to_pylist()
    sources = corpus.column("source").to_pylist()
    matched: dict[str, str] = {}

    known = set(ids)
    for sid in request.sample_ids:
        if sid in known:
            matched.setdefault(sid, "sample_id")
        else:
            problems.append(f"unknown sample id {sid}")
    for pair in request.source_keys:
        source, key = pair.split(":", 1)
        sid = make_sample_id(source, key)
        if sid in known:
            matched.setdefault(sid, "source_key")
        else:
            problems.append(f"no row for source key {pair!r}")
    urls = set(request.urls)
    domains = tuple(request.domains)
    for sid, url in zip(ids, corpus.column("source_url").to_pylist()):
        if not url:
            continue
        if url in urls:
            matched.setdefault(sid, "url")
        elif domains:
            host = _host(url)
            if any(host == d or host.endswith("." + d) for d in domains):
                matched.setdefault(sid, "domain")
    for url in urls - set(corpus.column("source_url").to_pylist()):
        problems.append(f"no row with URL {url}")

    phashes = corpus.column("phash").to_pylist()
    targets: list[int] = []
    for name in request.image_files:
        path = Path(name) if Path(name).is_absolute() else base_dir / name
        try:
            targets.append(phash_bytes(path.read_bytes()))
        except FileNotFoundError:
            problems.append(f"image file {path} does not exist")
        except Exception as exc:  # noqa: BLE001 - any decode failure is reported, never fatal
            problems.append(f"image file {path} cannot be decoded: {exc}")
    if targets:
        for sid, value in zip(ids, phashes):
            if value is not None and any(hamming(value, t) <= request.max_hamming for t in targets):
                matched.setdefault(sid, "image")

    # Every perceptual copy (equal hash) of a matched sample, in any source.
    matched_hashes = {h for sid, h in zip(ids, phashes) if sid in matched and h is not None}
    for sid, value in zip(ids, phashes):
        if value in matched_hashes:
            matched.setdefault(sid, "phash_duplicate")

    source_of = dict(zip(ids, sources))
    rows = sorted(matched.items())
    table = pa.table(
        {
            "request_id": [request.id] * len(rows),
            "sample_id": [sid for sid, _ in rows],
            "source": [source_of[sid] for sid, _ in rows],
            "matched_by": [how for _, how in rows],
        },
        schema=OPTOUT_MATCH_SCHEMA,
    )
    return table, problems




def shards_of(paths: StoragePaths, matches: pa.Table, options: dict | None = None) -> dict[str, list[str]]:
    """sample_id -> shard files (relative to the MDS root) that hold it."""
    out: dict[str, list[str]] = {}
    for source in sorted(set(matches.column("source").to_pylist())):
        ds = open_table(paths.exports_table(source), options)
        if ds is None:
            continue
        t = ds.to_table(columns=["sample_id", "shard"], filter="shard IS NOT NULL")
        t = t.filter(pc.is_in(t.column("sample_id"), value_set=matches.column("sample_id")))
        for sid, shard in zip(t.column("sample_id").to_pylist(), t.column("shard").to_pylist()):
            out.setdefault(sid, []).append(shard)
    return out


def now() -> datetime:
    return datetime.now(timezone.utc)


@dataclass
class OptOutReport:
    requests: int = 0
    matched: pa.Table = field(default_factory=OPTOUT_MATCH_SCHEMA.empty_table)
    audit: pa.Table = field(default_factory=OPTOUT_AUDIT_SCHEMA.empty_table)
    errors: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)


def apply_requests(paths: StoragePaths, optout_dir: str, sources: list[str], options: dict | None = None) -> OptOutReport:
    """Resolve every request; write the matches (read by skip_lists) and the audit table."""
    import lance

    loaded = load_requests(optout_dir)
    report = OptOutReport(requests=len(loaded.requests), errors=list(loaded.errors), duplicates=list(loaded.duplicates))
    corpus = corpus_rows(paths, sources, options)
    previous = open_table(paths.optout_audit_table(), options)
    first_seen: dict[tuple[str, str], datetime] = {}
    if previous is not None:
        for row in previous.to_table(columns=["request_id", "fingerprint", "first_effective_at"]).to_pylist():
            first_seen[(row["request_id"], row["fingerprint"])] = row["first_effective_at"]
    matches, audit = [], []
    resolved_at = now()
    for request_id, item in sorted(loaded.requests.items()):
        table, problems = resolve(item.request, corpus, item.path.parent)
        matches.append(table)
        shards = shards_of(paths, table, options)
        fingerprint = item.request.fingerprint()
        audit.append(
            {
                "request_id": request_id,
                "fingerprint": fingerprint,
                "requester_note": item.request.requester_note,
                "request_file": str(item.path),
                "matched_samples": table.num_rows,
                "shards_touched": sorted({s for v in shards.values() for s in v}),
                "problems": problems,
                "first_effective_at": first_seen.get((request_id, fingerprint), resolved_at),
                "resolved_at": resolved_at,
            }
        )
    report.matched = pa.concat_tables(matches) if matches else OPTOUT_MATCH_SCHEMA.empty_table()
    report.audit = pa.Table.from_pylist(audit, schema=OPTOUT_AUDIT_SCHEMA) if audit else OPTOUT_AUDIT_SCHEMA.empty_table()
    lance.write_dataset(report.matched, paths.optout_samples_table(), mode="overwrite", storage_options=options)
    lance.write_dataset(report.audit, paths.optout_audit_table(), mode="overwrite", storage_options=options)
    return report


def ingest_matcher(optout_dir: str):
    """An ``OptOutMatcher`` for ingest: sources that land later get ``opted_out`` rows for
    requests that name their ids, keys, URLs or domains (image files are matched after hashing,
    through the skip lists)."""
    loaded = load_requests(optout_dir)
    if not loaded.requests:
        return None
    by_id, by_key, by_url, by_domain = {}, {}, {}, []
    for request_id, item in loaded.requests.items():
        r = item.request
        by_id.update({sid: request_id for sid in r.sample_ids})
        by_key.update({pair: request_id for pair in r.source_keys})
        by_url.update({url: request_id for url in r.urls})
        by_domain.extend((d, request_id) for d in r.domains)

    def match(source: str, sid: str, item) -> str | None:
        if sid in by_id:
            return by_id[sid]
        if f"{source}:{item.key}" in by_key:
            return by_key[f"{source}:{item.key}"]
        for url in (item.url, item.source_url):
            if url and url in by_url:
                return by_url[url]
            if url and by_domain:
                host = _host(url)
                for domain, request_id in by_domain:
                    if host == domain or host.endswith("." + domain):
                        return request_id
        return None

    return match
