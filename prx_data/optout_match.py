"""Matching opt-out requests to samples with table joins, never a loop of scans.

Every request's names (sample ids, ``source:key`` pairs, URLs, domains) become rows of small
tables that are joined against the corpus once, so 10,000 URLs in one request, or 1,000 requests,
cost about the size of the requests plus the size of the corpus, not their product.
Fingerprints (perceptual hashes and content keys) are joined the same way; only fingerprints with
a Hamming radius (image files with ``max_hamming > 0``) are compared one by one, each over a
numpy array of the corpus's hashes.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from prx_data.fingerprints import DEGENERATE_COLUMN, degenerate_mask
from prx_data.ids import sample_id as make_sample_id
from prx_data.lance_io import open_table
from prx_data.paths import StoragePaths
from prx_data.schema import OPTOUT_FINGERPRINT_TYPE, OPTOUT_MATCH_SCHEMA

RAW_COLUMNS = ["sample_id", "source", "source_key", "source_url", "status", "image_sha256", "phash"]
CANDIDATE_SCHEMA = pa.schema(
    [
        pa.field("sample_id", pa.string()),
        pa.field("source", pa.string()),
        pa.field("phash", pa.int64()),
        pa.field("degenerate", pa.bool_()),
        pa.field("sha256", pa.string()),
    ]
)
FINGERPRINT_SCHEMA = pa.schema([pa.field("request_id", pa.string()), *OPTOUT_FINGERPRINT_TYPE])
_HOST_RE = r"^[A-Za-z][A-Za-z0-9+.\-]*://(?:[^@/?#]*@)?(?P<host>[^:/?#]*)"


# Corpus -------------------------------------------------------------------------------------
def raw_rows(paths: StoragePaths, sources: Iterable[str], options: dict | None = None) -> pa.Table:
    """The identity and fingerprint columns of every row of every source (no image bytes)."""
    tables = []
    for source in sources:
        ds = open_table(paths.raw_table(source), options)
        if ds is None:
            continue
        names = ds.schema.names
        cols = [c for c in RAW_COLUMNS if c in names] + ([DEGENERATE_COLUMN] if DEGENERATE_COLUMN in names else [])
        t = ds.to_table(columns=cols)
        if "phash" not in names:
            t = t.append_column("phash", pa.nulls(t.num_rows, pa.int64()))
        degenerate = degenerate_mask(t)
        t = t.select(RAW_COLUMNS).append_column("degenerate", degenerate)
        tables.append(t)
    if not tables:
        return raw_schema().empty_table()
    return pa.concat_tables(tables).cast(raw_schema())


def raw_schema() -> pa.Schema:
    return pa.schema(
        [
            ("sample_id", pa.string()), ("source", pa.string()), ("source_key", pa.string()), ("source_url", pa.string()),
            ("status", pa.string()), ("image_sha256", pa.string()), ("phash", pa.int64()), ("degenerate", pa.bool_()),
        ]
    )


def exported_rows(paths: StoragePaths, sources: Iterable[str], options: dict | None = None) -> pa.Table:
    """sample_id, source, shard, index_in_shard, phash of every exported sample: the hash of the
    image that is in the shard, which a later re-ingest does not change."""
    tables = []
    for source in sources:
        ds = open_table(paths.exports_table(source), options)
        if ds is None:
            continue
        tables.append(ds.to_table(columns=["sample_id", "source", "shard", "index_in_shard", "phash"], filter="shard IS NOT NULL"))
    schema = pa.schema([("sample_id", pa.string()), ("source", pa.string()), ("shard", pa.string()), ("index_in_shard", pa.int64()), ("phash", pa.int64())])
    return pa.concat_tables(tables).cast(schema) if tables else schema.empty_table()


def candidates(raw: pa.Table, exported: pa.Table | None = None, include_raw: bool = True) -> pa.Table:
    """What fingerprints are compared with: every raw row (its current hash and content key) and
    every exported sample (the hash of the exported image, with the row's content key)."""
    parts = [] if not include_raw else [
        pa.table(
            {
                "sample_id": raw["sample_id"],
                "source": raw["source"],
                "phash": raw["phash"],
                "degenerate": raw["degenerate"],
                "sha256": raw["image_sha256"],
            }
        ).cast(CANDIDATE_SCHEMA)
    ]
    if exported is not None and exported.num_rows:
        info = raw.select(["sample_id", "degenerate", "image_sha256"])
        joined = exported.select(["sample_id", "source", "phash"]).join(info, "sample_id", join_type="left outer")
        parts.append(
            pa.table(
                {
                    "sample_id": joined["sample_id"],
                    "source": joined["source"],
                    "phash": joined["phash"],
                    "degenerate": pc.fill_null(joined["degenerate"], False),
                    "sha256": joined["image_sha256"],
                }
            ).cast(CANDIDATE_SCHEMA)
        )
    return pa.concat_tables(parts) if parts else CANDIDATE_SCHEMA.empty_table()


# Identity -----------------------------------------------------------------------------------
def named_tables(requests: dict) -> dict[str, pa.Table]:
    """Per kind, (request_id, value[, sample_id]) rows for every name of every request."""
    ids, urls, domains = ([], [], []), ([], []), ([], [])
    for request_id, request in requests.items():
        for sid in request.sample_ids:
            ids[0].append(request_id), ids[1].append(f"sample_id {sid}"), ids[2].append(sid)
        for pair in request.source_keys:
            source, key = pair.split(":", 1)
            ids[0].append(request_id), ids[1].append(f"source_key {pair}"), ids[2].append(make_sample_id(source, key))
        for url in request.urls:
            urls[0].append(request_id), urls[1].append(url)
        for domain in request.domains:
            domains[0].append(request_id), domains[1].append(domain)
    s = pa.string()
    return {
        "ids": pa.table({"request_id": pa.array(ids[0], s), "name": pa.array(ids[1], s), "sample_id": pa.array(ids[2], s)}),
        "urls": pa.table({"request_id": pa.array(urls[0], s), "source_url": pa.array(urls[1], s)}),
        "domains": pa.table({"request_id": pa.array(domains[0], s), "domain": pa.array(domains[1], s)}),
    }


def host_suffixes(raw: pa.Table) -> pa.Table:
    """(sample_id, domain) for the host of each row's URL and every parent domain of it."""
    rows = raw.filter(pc.is_valid(raw["source_url"]))
    hosts = pc.struct_field(pc.extract_regex(rows["source_url"], _HOST_RE), [0])
    current = pc.utf8_lower(hosts)
    ids = rows["sample_id"]
    parts = []
    for _ in range(128):  # a DNS name has at most 127 labels
        valid = pc.and_(pc.is_valid(current), pc.not_equal(current, ""))
        valid = pc.fill_null(valid, False)
        if not pc.any(valid).as_py():
            break
        parts.append(pa.table({"sample_id": pc.filter(ids, valid), "domain": pc.filter(current, valid)}))
        has_dot = pc.fill_null(pc.match_substring(current, "."), False)
        stripped = pc.replace_substring_regex(current, r"^[^.]*\.", "")
        current = pc.if_else(has_dot, stripped, pa.scalar(None, pa.string()))
    if not parts:
        return pa.table({"sample_id": pa.array([], pa.string()), "domain": pa.array([], pa.string())})
    return pa.concat_tables(parts)


def _match_rows(joined: pa.Table, matched_by: pa.Array | str) -> pa.Table:
    n = joined.num_rows
    by = pa.array([matched_by] * n, pa.string()) if isinstance(matched_by, str) else matched_by
    return pa.table(
        {
            "request_id": joined["request_id"],
            "sample_id": joined["sample_id"],
            "source": joined["source"],
            "matched_by": by,
            "rule": pa.array(["identity"] * n, pa.string()),
            "distance": pa.nulls(n, pa.int32()),
            "fingerprint_of": pa.nulls(n, pa.string()),
        }
    ).cast(OPTOUT_MATCH_SCHEMA)


def match_identity(named: dict[str, pa.Table], raw: pa.Table) -> tuple[pa.Table, pa.Table]:
    """(identity matches, unmatched names as (request_id, name))."""
    corpus = raw.select(["sample_id", "source", "source_url"])
    out, unmatched = [], []
    ids = named["ids"]
    if ids.num_rows:
        joined = ids.join(corpus.select(["sample_id", "source"]), "sample_id", join_type="inner")
        kind = pc.list_element(pc.split_pattern(joined["name"], " ", max_splits=1), 0)
        out.append(_match_rows(joined, kind))
        missing = ids.join(corpus.select(["sample_id"]), "sample_id", join_type="left anti")
        unmatched.append(missing.select(["request_id", "name"]))
    urls = named["urls"]
    if urls.num_rows:
        with_url = corpus.filter(pc.is_valid(corpus["source_url"]))
        out.append(_match_rows(urls.join(with_url, "source_url", join_type="inner"), "url"))
        missing = urls.join(with_url.select(["source_url"]), "source_url", join_type="left anti")
        unmatched.append(pa.table({"request_id": missing["request_id"], "name": pc.binary_join_element_wise("url ", missing["source_url"], "")}))
    domains = named["domains"]
    if domains.num_rows:
        suffixes = host_suffixes(corpus).join(corpus.select(["sample_id", "source"]), "sample_id", join_type="inner")
        out.append(_match_rows(domains.join(suffixes, "domain", join_type="inner"), "domain"))
        missing = domains.join(suffixes.select(["domain"]), "domain", join_type="left anti")
        unmatched.append(pa.table({"request_id": missing["request_id"], "name": pc.binary_join_element_wise("domain ", missing["domain"], "")}))
    empty_unmatched = pa.table({"request_id": pa.array([], pa.string()), "name": pa.array([], pa.string())})
    matches = pa.concat_tables(out) if out else OPTOUT_MATCH_SCHEMA.empty_table()
    return matches, (pa.concat_tables([u.cast(empty_unmatched.schema) for u in unmatched]) if unmatched else empty_unmatched)


# Fingerprints -------------------------------------------------------------------------------
def fingerprints_of_samples(matches: pa.Table, cands: pa.Table) -> pa.Table:
    """The fingerprints (hash unless degenerate, and content key) of every matched sample, in
    its current row and as exported: what keeps a copy excluded after the row loses its bytes."""
    if matches.num_rows == 0:
        return FINGERPRINT_SCHEMA.empty_table()
    pairs = matches.select(["request_id", "sample_id"])
    joined = pairs.join(cands, "sample_id", join_type="inner")
    degenerate = pc.fill_null(joined["degenerate"], False)
    phash = pc.if_else(degenerate, pa.scalar(None, pa.int64()), joined["phash"])
    n = joined.num_rows
    table = pa.table(
        {
            "request_id": joined["request_id"],
            "phash": phash,
            "sha256": joined["sha256"],
            "max_distance": pa.array([0] * n, pa.int32()),
            "origin": pc.binary_join_element_wise("sample:", joined["sample_id"], ""),
        }
    ).cast(FINGERPRINT_SCHEMA)
    table = table.filter(pc.or_(pc.is_valid(table["phash"]), pc.is_valid(table["sha256"])))
    return unique_fingerprints(table)


def unique_fingerprints(table: pa.Table) -> pa.Table:
    """One row per (request, phash, sha256, max_distance); the first origin is kept."""
    if table.num_rows == 0:
        return FINGERPRINT_SCHEMA.empty_table()
    grouped = table.group_by(["request_id", "phash", "sha256", "max_distance"], use_threads=False).aggregate([("origin", "min")])
    return grouped.rename_columns(["request_id", "phash", "sha256", "max_distance", "origin"]).select(FINGERPRINT_SCHEMA.names).cast(FINGERPRINT_SCHEMA)


def match_fingerprints(fps: pa.Table, cands: pa.Table) -> pa.Table:
    """Samples whose hash (non-degenerate, within the fingerprint's radius) or content key equals
    a request's fingerprint."""
    out = []
    if fps.num_rows == 0 or cands.num_rows == 0:
        return OPTOUT_MATCH_SCHEMA.empty_table()
    hashed = cands.filter(pc.and_(pc.is_valid(cands["phash"]), pc.invert(pc.fill_null(cands["degenerate"], False))))
    exact = fps.filter(pc.and_(pc.is_valid(fps["phash"]), pc.equal(fps["max_distance"], 0)))
    if exact.num_rows and hashed.num_rows:
        joined = exact.select(["request_id", "phash", "origin"]).join(hashed.select(["sample_id", "source", "phash"]), "phash", join_type="inner")
        out.append(_fp_rows(joined, "phash", np.zeros(joined.num_rows, np.int32)))
    radius = fps.filter(pc.and_(pc.is_valid(fps["phash"]), pc.greater(fps["max_distance"], 0)))
    if radius.num_rows and hashed.num_rows:
        values = hashed["phash"].to_numpy().view(np.uint64)
        for row in radius.to_pylist():
            distance = np.bitwise_count(values ^ np.uint64(row["phash"] & 0xFFFFFFFFFFFFFFFF)).astype(np.int32)
            hit = np.flatnonzero(distance <= row["max_distance"])
            if len(hit):
                found = hashed.take(pa.array(hit)).select(["sample_id", "source"])
                found = found.append_column("request_id", pa.array([row["request_id"]] * len(hit), pa.string()))
                found = found.append_column("origin", pa.array([row["origin"]] * len(hit), pa.string()))
                out.append(_fp_rows(found, "phash", distance[hit]))
    keyed = fps.filter(pc.is_valid(fps["sha256"]))
    with_key = cands.filter(pc.is_valid(cands["sha256"]))
    if keyed.num_rows and with_key.num_rows:
        joined = keyed.select(["request_id", "sha256", "origin"]).join(with_key.select(["sample_id", "source", "sha256"]), "sha256", join_type="inner")
        out.append(_fp_rows(joined, "content_key", np.zeros(joined.num_rows, np.int32)))
    return pa.concat_tables(out) if out else OPTOUT_MATCH_SCHEMA.empty_table()


def _fp_rows(joined: pa.Table, how: str, distance: np.ndarray) -> pa.Table:
    origin = joined["origin"]
    from_image = pc.starts_with(origin, "image:")
    matched_by = pc.if_else(from_image, pa.scalar("image"), pa.scalar(how))
    return pa.table(
        {
            "request_id": joined["request_id"],
            "sample_id": joined["sample_id"],
            "source": joined["source"],
            "matched_by": matched_by,
            "rule": pa.array(["fingerprint"] * joined.num_rows, pa.string()),
            "distance": pa.array(distance, pa.int32()),
            "fingerprint_of": origin,
        }
    ).cast(OPTOUT_MATCH_SCHEMA)


def one_match_per_sample(matches: pa.Table) -> pa.Table:
    """One row per (request, sample): identity before fingerprint, then the smallest distance."""
    if matches.num_rows == 0:
        return OPTOUT_MATCH_SCHEMA.empty_table()
    rank = pc.if_else(pc.equal(matches["rule"], "identity"), 0, 1)
    distance = pc.fill_null(matches["distance"], 0)
    keyed = matches.append_column("_rank", rank).append_column("_distance", distance)
    keyed = keyed.sort_by([("request_id", "ascending"), ("sample_id", "ascending"), ("_rank", "ascending"), ("_distance", "ascending"), ("matched_by", "ascending")])
    req = keyed["request_id"].combine_chunks()
    sid = keyed["sample_id"].combine_chunks()
    n = keyed.num_rows
    first = np.ones(n, dtype=bool)
    if n > 1:
        same = pc.and_(pc.equal(req[1:], req[:-1]), pc.equal(sid[1:], sid[:-1])).to_numpy(zero_copy_only=False)
        first[1:] = ~same
    return keyed.filter(pa.array(first)).select(OPTOUT_MATCH_SCHEMA.names)


__all__ = [
    "candidates",
    "exported_rows",
    "fingerprints_of_samples",
    "host_suffixes",
    "match_fingerprints",
    "match_identity",
    "named_tables",
    "one_match_per_sample",
    "raw_rows",
    "unique_fingerprints",
]
