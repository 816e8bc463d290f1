"""Opt-out requests: what a person or site asked to remove, and the samples that covers.

A request is a YAML or JSON file in the opt-out folder (or written by ``prx-data optout add``).
Resolution goes through the lineage tables: sample ids, source keys, URLs and domains match
rows of the source tables (identity); image files, and every row a request names, give
fingerprints (perceptual hash; the content key ``image_sha256`` for degenerate images) that match
every copy in any source (fingerprint). The fingerprints are durable: kept in the audit table
across re-ingests that drop a matched row's bytes, and re-applied to every source on every
skip-list build, including sources that land later. Nothing is deleted: the matches are handed
to the skip lists with reason ``optout:<request id>``. Matching is done with joins
(``optout.match``), so bulk requests cost the request plus the corpus, not their product.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from prx_data.core.ids import normal_key
from prx_data.core.paths import StoragePaths
from prx_data.core.schema import OPTOUT_AUDIT_SCHEMA, OPTOUT_MATCH_SCHEMA
from prx_data.core.urls import URL_KEY_PREFIX, key_uri, load_url_key, normalize_url, redact_url, url_key
from prx_data.curation.optout.files import (
    DEFAULT_MAX_IMAGE_BYTES,
    DEFAULT_MAX_IMAGE_PIXELS,
    DEFAULT_MAX_REQUEST_BYTES,
    UnreadableFile,
    read_capped_file,
    read_image_file,
)
from prx_data.imaging.fingerprints import image_fingerprint

_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,79}")  # fullmatch: "$" accepts a final newline
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
        if not _ID_RE.fullmatch(value):
            raise ValueError("must be 1-80 chars of letters, digits, '.', '_' or '-'")
        return value

    @field_validator("sample_ids")
    @classmethod
    def _ids_look_like_ids(cls, values: list[str]) -> list[str]:
        bad = [v for v in values if not _SAMPLE_ID_RE.fullmatch(v)]
        if bad:
            raise ValueError(f"not sample ids (32 hex chars): {bad[:3]}")
        return values

    @field_validator("source_keys")
    @classmethod
    def _source_keys_have_a_source(cls, values: list[str]) -> list[str]:
        bad = [v for v in values if ":" not in v]
        if bad:
            raise ValueError(f"expected '<source>:<key>', got {bad[:3]}")
        # Keys are stored in NFC (core/ids.py): a request in either spelling names the row.
        return [normal_key(v) for v in values]

    @field_validator("urls")
    @classmethod
    def _urls_are_not_blank(cls, values: list[str]) -> list[str]:
        # A blank URL names nothing, and has no keyed hash to be stored (and matched) by.
        if any(not v.strip() for v in values):
            raise ValueError("a URL is blank")
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
    failed_files: list[str] = field(default_factory=list)  # the files behind ``errors``


class OptOutFolderError(RuntimeError):
    """The opt-out folder is gone or unreadable: nothing may be withdrawn because of it."""


REQUEST_SUFFIXES = (".yaml", ".yml", ".json")


def load_request(path: Path, max_bytes: int = DEFAULT_MAX_REQUEST_BYTES) -> OptOutRequest:
    try:
        # Not confined to the folder (a request may be a link to a managed file), only typed and capped.
        data = read_capped_file(path, max_bytes, "request file")
    except UnreadableFile as exc:
        raise ValueError(str(exc)) from None
    try:
        text = data.decode("utf-8")
        # The C loader when present: a 10,000-URL request parses in milliseconds, not seconds.
        raw = json.loads(text) if path.suffix == ".json" else yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
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


def load_requests(folder: str | Path, *, missing_ok: bool = False, max_bytes: int = DEFAULT_MAX_REQUEST_BYTES) -> RequestSet:
    """Every request in ``folder``. A file that cannot be loaded (bad YAML or schema, not a
    regular file, too large) is one error and never stops the others. A missing or unreadable
    folder raises ``OptOutFolderError`` unless ``missing_ok`` (ingest's early matching)."""
    out = RequestSet()
    folder = Path(folder)
    try:
        entries = sorted(folder.iterdir())
    except FileNotFoundError:
        if missing_ok:
            return out
        raise OptOutFolderError(f"the opt-out folder {folder} does not exist") from None
    except OSError as exc:
        if missing_ok:
            return out
        raise OptOutFolderError(f"the opt-out folder {folder} cannot be read: {exc.strerror or exc}") from None
    # Every entry with a request suffix counts, whatever its type: a FIFO or a directory named
    # 'req.yaml' is reported (its last applied version stays in force), never silently skipped.
    files = [p for p in entries if p.suffix in REQUEST_SUFFIXES and _counted(p)]
    for path in files:
        try:
            request = load_request(path, max_bytes)
        except ValueError as exc:
            out.errors.append(str(exc))
            out.failed_files.append(str(path))
            continue
        previous = out.requests.get(request.id)
        if previous is None:
            out.requests[request.id] = LoadedRequest(request, path)
        elif previous.request.fingerprint() == request.fingerprint():
            out.duplicates.append(f"{path} repeats {previous.path}")
        else:
            out.errors.append(f"{path}: request id {request.id!r} already used by {previous.path} with other content")
            out.failed_files.append(str(path))
    return out


def _counted(path: Path) -> bool:
    # Editor swap files, ".DS_Store" and write_request's "*.tmp" are not requests; counting them
    # would rebuild the skip lists for nothing.
    return not path.name.startswith(".") and not path.name.endswith((".tmp", "~"))


def folder_version(folder: str | Path) -> tuple[str, int]:
    """(data version, file count) of the opt-out folder: a hash over every file's relative path
    and content, so touching a file changes nothing and editing one request changes it."""
    root = Path(folder)
    digest = hashlib.sha256()
    count = 0
    if root.is_dir():
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for name in sorted(filenames):
                path = Path(dirpath) / name
                if not _counted(path) or not path.is_file():
                    continue
                digest.update(path.relative_to(root).as_posix().encode() + b"\0")
                digest.update(hashlib.sha256(path.read_bytes()).digest())
                count += 1
    return digest.hexdigest()[:16], count


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


def now() -> datetime:
    return datetime.now(UTC)


@dataclass
class OptOutReport:
    requests: int = 0
    matched: pa.Table = field(default_factory=OPTOUT_MATCH_SCHEMA.empty_table)
    audit: pa.Table = field(default_factory=OPTOUT_AUDIT_SCHEMA.empty_table)
    errors: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    seconds: float = 0.0
    # request id -> why its last applied version is in force (its file failed to load or vanished)
    kept: dict[str, str] = field(default_factory=dict)

    def summary_lines(self) -> list[str]:
        """One line per request, however many names it lists."""
        return [summary_line(row) for row in self.audit.to_pylist()]


def summary_line(row: dict) -> str:
    return (
        f"request {row['request_id']}: {row['named']} name(s), {row['matched_samples']} sample(s) matched "
        f"({row['matched_identity']} by identity, {row['matched_fingerprint']} by fingerprint), "
        f"{len(row['unmatched'])} unmatched, {len(row['fingerprints'])} fingerprint(s) kept, "
        f"{len(row['shards_touched'])} shard(s)"
    )


def _image_fingerprints(
    requests: dict[str, LoadedRequest], max_bytes: int = DEFAULT_MAX_IMAGE_BYTES, max_pixels: int = DEFAULT_MAX_IMAGE_PIXELS
) -> tuple[pa.Table, dict[str, list[str]]]:
    """Fingerprints of the requests' image files, and per request the files that failed."""
    # lazy: pulls in lance, pandas
    from prx_data.curation.optout.match import FINGERPRINT_SCHEMA

    rows: list[dict] = []
    problems: dict[str, list[str]] = {}
    for request_id, item in requests.items():
        for name in item.request.image_files:
            path = Path(name) if Path(name).is_absolute() else item.path.parent / name
            try:
                phash, sha, _ = image_fingerprint(read_image_file(path, max_bytes, max_pixels))
            except UnreadableFile as exc:
                problems.setdefault(request_id, []).append(str(exc))
                continue
            except Exception as exc:  # noqa: BLE001 - any decode failure is reported, never fatal
                problems.setdefault(request_id, []).append(f"image file {path} cannot be decoded: {exc}")
                continue
            rows.append(
                {
                    "request_id": request_id,
                    "phash": phash,
                    "sha256": sha,
                    "max_distance": item.request.max_hamming,
                    "origin": f"image:{name}",
                }
            )
    return pa.Table.from_pylist(rows, schema=FINGERPRINT_SCHEMA), problems


def _previous_audit(paths: StoragePaths, options: dict | None) -> pa.Table | None:
    # lazy: pulls in lance, pandas
    from prx_data.core.lance_io import open_table  # lance only where tables are read: `optout add` stays quick

    ds = open_table(paths.optout_audit_table(), options)
    if ds is None:
        return None
    wanted = [
        c
        for c in ("request_id", "fingerprint", "first_effective_at", "fingerprints", "request_file", "request_json", "matched_samples")
        if c in ds.schema.names
    ]
    return ds.to_table(columns=wanted)


def _kept_fingerprints(previous: pa.Table | None, request_ids: set[str]) -> pa.Table:
    """Every fingerprint recorded before for a request that is still filed."""
    # lazy: pulls in lance, pandas
    from prx_data.curation.optout.match import FINGERPRINT_SCHEMA

    if previous is None or "fingerprints" not in previous.column_names or previous.num_rows == 0:
        return FINGERPRINT_SCHEMA.empty_table()
    previous = previous.filter(pc.is_in(previous["request_id"], value_set=pa.array(sorted(request_ids), pa.string())))
    lengths = pc.fill_null(pc.list_value_length(previous["fingerprints"]), 0)
    flat = pc.list_flatten(previous["fingerprints"])
    if len(flat) == 0:
        return FINGERPRINT_SCHEMA.empty_table()
    ids = pc.take(previous["request_id"], pa.array(np.repeat(np.arange(previous.num_rows), lengths.to_numpy(zero_copy_only=False))))
    table = pa.Table.from_struct_array(flat).add_column(0, "request_id", ids)
    return table.select(FINGERPRINT_SCHEMA.names).cast(FINGERPRINT_SCHEMA)


def _per_request(table: pa.Table, column: str, agg: str) -> dict:
    if table.num_rows == 0:
        return {}
    grouped = table.group_by("request_id", use_threads=False).aggregate([(column, agg)])
    return dict(zip(grouped["request_id"].to_pylist(), grouped[f"{column}_{agg}"].to_pylist()))


def resolve_all(
    requests: dict[str, LoadedRequest],
    raw: pa.Table,
    exported: pa.Table,
    previous: pa.Table | None = None,
    url_hash_key: bytes | None = None,
) -> tuple[pa.Table, pa.Table, pa.Table, dict[str, list[str]]]:
    """(matches, unmatched names, fingerprints kept per request, problems per request).

    Identity: the names each request lists, joined against the source tables. Fingerprints: of
    the request's image files, of every row it names (current and as exported), and every one
    recorded for it before; each is joined against every row and every exported sample.
    """
    # lazy: pulls in lance, pandas
    from prx_data.curation.optout.match import (
        fingerprints_of_samples,
        hashed_candidates,
        keyed_candidates,
        match_fingerprints,
        match_identity,
        named_tables,
        one_match_per_sample,
        unique_fingerprints,
    )

    identity, unmatched = match_identity(named_tables({k: v.request for k, v in requests.items()}, url_hash_key), raw)
    images, problems = _image_fingerprints(requests)
    fingerprints = unique_fingerprints(
        pa.concat_tables([images, fingerprints_of_samples(identity, raw, exported), _kept_fingerprints(previous, set(requests))])
    )
    by_fingerprint = match_fingerprints(fingerprints, hashed_candidates(raw, exported), keyed_candidates(raw))
    matches = one_match_per_sample(pa.concat_tables([identity, by_fingerprint]))
    if images.num_rows:
        used = set(zip(by_fingerprint["request_id"].to_pylist(), by_fingerprint["fingerprint_of"].to_pylist()))
        lost = [(r, o) for r, o in zip(images["request_id"].to_pylist(), images["origin"].to_pylist()) if (r, o) not in used]
        if lost:
            extra = pa.table({"request_id": [r for r, _ in lost], "name": [f"image {o.removeprefix('image:')}" for _, o in lost]})
            unmatched = pa.concat_tables([unmatched, extra.cast(unmatched.schema)])
    return matches, unmatched, fingerprints, problems


def _url_key_of(url: str, key: bytes) -> str:
    hashed = url_key(url, key)
    assert hashed is not None, "OptOutRequest rejects blank URLs"
    return hashed


def stored_request_json(request: OptOutRequest, url_hash_key: bytes | None) -> str:
    """The request as kept in the audit table, to stay in force if its file breaks: its URLs
    as their keyed hashes (``urlkey:<hash>``, what rows are matched by), never as written, since
    a request's URLs may carry credentials (docs/security.md)."""
    if not url_hash_key:
        return request.model_copy(update={"urls": [redact_url(u) for u in request.urls]}).model_dump_json()
    hashed = [u if u.startswith(URL_KEY_PREFIX) else URL_KEY_PREFIX + _url_key_of(u, url_hash_key) for u in request.urls]
    return request.model_copy(update={"urls": hashed}).model_dump_json()


def keep_in_force(loaded: RequestSet, previous: pa.Table | None, folder_error: str | None) -> dict[str, tuple[LoadedRequest, str]]:
    """The previously applied requests that this load did not bring back, each with why: their
    last applied version stays in force (opt-outs never shrink by accident; withdrawal is
    ``prx-data optout withdraw``)."""
    if previous is None or previous.num_rows == 0 or "request_json" not in previous.column_names:
        return {}
    failed = set(loaded.failed_files)
    kept: dict[str, tuple[LoadedRequest, str]] = {}
    for row in previous.to_pylist():
        rid, text, path = row["request_id"], row.get("request_json"), row.get("request_file") or ""
        if rid in loaded.requests or not text:
            continue
        if folder_error:
            why = f"kept in force: {folder_error}"
        elif path in failed:
            why = "failed to load; its last applied version stays in force until the file is fixed or the request is withdrawn"
        elif Path(path).exists() or Path(path).is_symlink():
            why = "no longer holds this request id; its last applied version stays in force until it is withdrawn"
        else:
            why = "vanished; its last applied version stays in force until it is withdrawn (prx-data optout withdraw --id ID --reason ...)"
        kept[rid] = (LoadedRequest(OptOutRequest.model_validate_json(text), Path(path)), why)
    return kept


def apply_requests(paths: StoragePaths, optout_dir: str, sources: list[str], options: dict | None = None) -> OptOutReport:
    """Resolve every request; write the matches (read by skip_lists) and the audit table."""
    import time

    import lance

    # lazy: pulls in lance, pandas
    from prx_data.curation.optout.match import exported_rows, raw_rows

    started = time.perf_counter()
    previous = _previous_audit(paths, options)
    try:
        loaded = load_requests(optout_dir)
        folder_error = None
    except OptOutFolderError as exc:
        loaded, folder_error = RequestSet(), str(exc)
    kept = keep_in_force(loaded, previous, folder_error)
    report = OptOutReport(requests=len(loaded.requests), errors=list(loaded.errors), duplicates=list(loaded.duplicates))
    if folder_error and kept:
        # No folder and nothing applied before is a root without opt-outs, not an accident.
        report.errors.insert(0, f"{folder_error}: nothing is withdrawn, the {len(kept)} request(s) applied before stay in force")
    report.kept = {rid: why for rid, (_, why) in kept.items()}
    report.errors += [f"request {rid} ({item.path}) {why}" for rid, (item, why) in sorted(kept.items())]
    loaded.requests.update({rid: item for rid, (item, _) in kept.items()})
    raw = raw_rows(paths, sources, options)
    exported = exported_rows(paths, sources, options)
    first_seen: dict[tuple[str, str], datetime] = {}
    if previous is not None and "first_effective_at" in previous.column_names:
        for rid, fp, at in zip(
            previous["request_id"].to_pylist(), previous["fingerprint"].to_pylist(), previous["first_effective_at"].to_pylist()
        ):
            first_seen[(rid, fp)] = at
    url_hash_key = load_url_key(key_uri(paths.lance_root), options)
    matches, unmatched, fingerprints, problems = resolve_all(loaded.requests, raw, exported, previous, url_hash_key)

    # lazy: pulls in lance, pandas
    from prx_data.curation.optout.match import _small_join

    placed = _small_join(matches.select(["request_id", "sample_id"]), exported.select(["sample_id", "shard"]), "sample_id")
    shards = _per_request(placed, "shard", "distinct")
    unmatched_by = _per_request(unmatched, "name", "list")
    fps_by: dict[str, list[dict]] = {}
    for fp in fingerprints.to_pylist():  # one per distinct image a request covers: small
        fps_by.setdefault(fp.pop("request_id"), []).append(fp)
    counts = _per_request(matches.append_column("one", pa.array([1] * matches.num_rows, pa.int64())), "one", "sum")
    identity = matches.filter(pc.equal(matches["rule"], "identity"))
    identity_counts = _per_request(identity.append_column("one", pa.array([1] * identity.num_rows, pa.int64())), "one", "sum")
    resolved_at = now()
    audit = []
    for request_id, item in sorted(loaded.requests.items()):
        r = item.request
        fingerprint = r.fingerprint()
        state = f"kept: {kept[request_id][1]}" if request_id in kept else "applied"
        missing = sorted(unmatched_by.get(request_id) or [])
        named = len(r.sample_ids) + len(r.source_keys) + len(r.urls) + len(r.domains) + len(r.image_files)
        notes = ([f"last applied version in force: {kept[request_id][1]}"] if request_id in kept else []) + list(
            problems.get(request_id, [])
        )
        if missing:
            notes.append(f"{len(missing)} of {named} names matched nothing (listed in 'unmatched')")
        matched = counts.get(request_id) or 0
        audit.append(
            {
                "request_id": request_id,
                "fingerprint": fingerprint,
                "requester_note": r.requester_note,
                "request_file": str(item.path),
                "matched_samples": matched,
                "shards_touched": sorted(shards.get(request_id) or []),
                "problems": notes,
                "first_effective_at": first_seen.get((request_id, fingerprint), resolved_at),
                "resolved_at": resolved_at,
                "matched_identity": identity_counts.get(request_id) or 0,
                "matched_fingerprint": matched - (identity_counts.get(request_id) or 0),
                "named": named,
                "unmatched": missing,
                "fingerprints": sorted(fps_by.get(request_id) or [], key=lambda f: (f["origin"], f["sha256"] or "", f["phash"] or 0)),
                "request_json": stored_request_json(r, url_hash_key),
                "state": state,
            }
        )
    report.matched = matches
    report.audit = pa.Table.from_pylist(audit, schema=OPTOUT_AUDIT_SCHEMA) if audit else OPTOUT_AUDIT_SCHEMA.empty_table()
    lance.write_dataset(report.matched, paths.optout_samples_table(), mode="overwrite", storage_options=options)
    lance.write_dataset(report.audit, paths.optout_audit_table(), mode="overwrite", storage_options=options)
    report.seconds = time.perf_counter() - started
    return report


def read_fingerprints(paths: StoragePaths, options: dict | None = None) -> pa.Table:
    """Every fingerprint of every filed request, as of the last resolution (for skip lists)."""
    previous = _previous_audit(paths, options)
    if previous is None:
        # lazy: pulls in lance, pandas
        from prx_data.curation.optout.match import FINGERPRINT_SCHEMA

        return FINGERPRINT_SCHEMA.empty_table()
    return _kept_fingerprints(previous, set(previous["request_id"].to_pylist()))


def ingest_matcher(optout_dir: str):
    """An ``OptOutMatcher`` for ingest: sources that land later get ``opted_out`` rows for
    requests that name their ids, keys, URLs or domains (image files are matched after hashing,
    through the skip lists)."""
    loaded = load_requests(optout_dir, missing_ok=True)
    if not loaded.requests:
        return None
    by_id, by_key, by_url, by_domain = {}, {}, {}, {}
    for request_id, item in loaded.requests.items():
        r = item.request
        by_id.update({sid: request_id for sid in r.sample_ids})
        by_key.update({pair: request_id for pair in r.source_keys})
        by_url.update({normalize_url(url): request_id for url in r.urls})
        by_domain.update({d: request_id for d in r.domains})

    def on_domain(url: str) -> str | None:
        # The host and each parent domain: a dict lookup per label, however many domains are listed.
        labels = _host(url).split(".")
        for i in range(len(labels)):
            found = by_domain.get(".".join(labels[i:]))
            if found:
                return found
        return None

    def match(source: str, sid: str, item) -> str | None:
        if sid in by_id:
            return by_id[sid]
        if f"{source}:{item.key}" in by_key:
            return by_key[f"{source}:{item.key}"]
        for url in (item.url, item.source_url):
            if url and normalize_url(url) in by_url:
                return by_url[normalize_url(url)]
            if url and by_domain:
                found = on_domain(url)
                if found:
                    return found
        return None

    # Ingest keeps an unchanged input object's rows without re-reading it only while the
    # requests it was matched against are the same (prx_data.ingest.plan.unit_manifest).
    match.fingerprint = hashlib.sha256(  # type: ignore[attr-defined]
        json.dumps([sorted(m.items()) for m in (by_id, by_key, by_url, by_domain)]).encode()
    ).hexdigest()[:16]
    return match
