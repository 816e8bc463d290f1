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

from prx_data.core.ids import sample_id as make_sample_id
from prx_data.core.lance_io import open_table
from prx_data.core.paths import StoragePaths
from prx_data.core.schema import OPTOUT_FINGERPRINT_TYPE, OPTOUT_MATCH_SCHEMA
from prx_data.core.urls import URL_KEY_PREFIX, redact_url, url_keys
from prx_data.imaging.fingerprints import DEGENERATE_COLUMN, degenerate_mask

RAW_COLUMNS = ["sample_id", "source", "source_key", "source_url", "status", "image_sha256", "phash", "source_url_key"]
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
        if "source_url_key" not in names:  # a table ingested before URLs were redacted
            t = t.append_column("source_url_key", pa.nulls(t.num_rows, pa.string()))
        degenerate = degenerate_mask(t)
        t = t.select(RAW_COLUMNS).append_column("degenerate", degenerate)
        tables.append(t)
    if not tables:
        return raw_schema().empty_table()
    return pa.concat_tables(tables).cast(raw_schema())


def raw_schema() -> pa.Schema:
    return pa.schema(
        [
            ("sample_id", pa.string()),
            ("source", pa.string()),
            ("source_key", pa.string()),
            ("source_url", pa.string()),
            ("status", pa.string()),
            ("image_sha256", pa.string()),
            ("phash", pa.int64()),
            ("source_url_key", pa.string()),
            ("degenerate", pa.bool_()),
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
    schema = pa.schema(
        [("sample_id", pa.string()), ("source", pa.string()), ("shard", pa.string()), ("index_in_shard", pa.int64()), ("phash", pa.int64())]
    )
    return pa.concat_tables(tables).cast(schema) if tables else schema.empty_table()


def _small_join(small: pa.Table, big: pa.Table, key: str, big_key: str | None = None, join_type: str = "inner") -> pa.Table:
    """Join a small table with a big one in about the big one's size: the big side is first cut
    down with ``is_in`` (a hash of the small side), then the two small tables are joined.
    (Acero hashes the right side of a join; with the corpus there a join costs seconds.)"""
    big_key = big_key or key
    hit = big.filter(pc.fill_null(pc.is_in(big[big_key], value_set=pc.unique(small[key].combine_chunks())), False))
    return small.join(hit, key, right_keys=big_key, join_type=join_type, use_threads=False)


def hashed_candidates(raw: pa.Table, exported: pa.Table | None = None, include_raw: bool = True) -> pa.Table:
    """(sample_id, source, phash) that a perceptual fingerprint is compared with: every raw row's
    current hash and every exported sample's hash (of the image that is in the shard), leaving
    out degenerate images, whose hash is no fingerprint."""
    schema = pa.schema([("sample_id", pa.string()), ("source", pa.string()), ("phash", pa.int64())])
    degenerate = raw["degenerate"]
    parts = []
    if include_raw:
        keep = pc.and_(pc.is_valid(raw["phash"]), pc.invert(pc.fill_null(degenerate, False)))
        parts.append(raw.filter(keep).select(schema.names).cast(schema))
    if exported is not None and exported.num_rows:
        rows = exported.filter(pc.is_valid(exported["phash"])).select(schema.names).cast(schema)
        flat_ids = raw.filter(pc.fill_null(degenerate, False))["sample_id"]
        if len(flat_ids):
            rows = rows.filter(pc.invert(pc.is_in(rows["sample_id"], value_set=flat_ids.combine_chunks())))
        parts.append(rows)
    return pa.concat_tables(parts) if parts else schema.empty_table()


def keyed_candidates(raw: pa.Table) -> pa.Table:
    """(sample_id, source, sha256): the exact content key of every raw row that has one."""
    rows = raw.filter(pc.is_valid(raw["image_sha256"]))
    return pa.table({"sample_id": rows["sample_id"], "source": rows["source"], "sha256": rows["image_sha256"]})


# Identity -----------------------------------------------------------------------------------
def named_tables(requests: dict, url_hash_key: bytes | None = None) -> dict[str, pa.Table]:
    """Per kind, (request_id, value[, sample_id]) rows for every name of every request. URLs
    also get their keyed hash under ``url_hash_key`` (rows store only the redacted URL)."""
    ids: tuple[list[str], list[str], list[str]] = ([], [], [])
    urls: tuple[list[str], list[str], list[str | None]] = ([], [], [])
    domains: tuple[list[str], list[str]] = ([], [])
    for request_id, request in requests.items():
        for sid in request.sample_ids:
            ids[0].append(request_id)
            ids[1].append(f"sample_id {sid}")
            ids[2].append(sid)
        for pair in request.source_keys:
            source, key = pair.split(":", 1)
            ids[0].append(request_id)
            ids[1].append(f"source_key {pair}")
            ids[2].append(make_sample_id(source, key))
        for url in request.urls:
            for hashed in _url_keys(url, url_hash_key):
                urls[0].append(request_id)
                urls[1].append(url)
                urls[2].append(hashed)
        for domain in request.domains:
            domains[0].append(request_id)
            domains[1].append(domain)
    s = pa.string()
    return {
        "ids": pa.table({"request_id": pa.array(ids[0], s), "name": pa.array(ids[1], s), "sample_id": pa.array(ids[2], s)}),
        "urls": pa.table(
            {
                "request_id": pa.array(urls[0], s),
                "source_url": pa.array(urls[1], s),
                "source_url_key": pa.array(urls[2], s),
            }
        ),
        "domains": pa.table({"request_id": pa.array(domains[0], s), "domain": pa.array(domains[1], s)}),
    }


def _url_keys(url: str, url_hash_key: bytes | None) -> list[str | None]:
    """A request URL's keyed hashes (of the normalised URL, and of the URL as written for rows
    not re-keyed yet); a kept request version stores the hash itself (urlkey:...)."""
    if url.startswith(URL_KEY_PREFIX):
        return [url.removeprefix(URL_KEY_PREFIX)]
    return list(url_keys(url, url_hash_key)) if url_hash_key else [None]


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


def _re_escape(text: str) -> str:
    return "".join("\\" + c if not c.isalnum() else c for c in text)


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
    corpus = raw.select(["sample_id", "source", "source_url", "source_url_key"])
    out, unmatched = [], []
    ids = named["ids"]
    if ids.num_rows:
        joined = _small_join(ids, corpus.select(["sample_id", "source"]), "sample_id")
        kind = pc.list_element(pc.split_pattern(joined["name"], " ", max_splits=1), 0)
        out.append(_match_rows(joined, kind))
        missing = _small_join(ids, corpus.select(["sample_id"]), "sample_id", join_type="left anti")
        unmatched.append(missing.select(["request_id", "name"]))
    urls = named["urls"]
    if urls.num_rows:
        # Rows store the redacted URL and the keyed hash of the normalised original: match the request's
        # URL by that hash; rows ingested before redaction (no hash) by the URL itself.
        keyed = corpus.filter(pc.is_valid(corpus["source_url_key"])).select(["sample_id", "source", "source_url_key"])
        legacy = corpus.filter(pc.and_(pc.is_valid(corpus["source_url"]), pc.is_null(corpus["source_url_key"]))).select(
            ["sample_id", "source", "source_url"]
        )
        by_key = urls.filter(pc.is_valid(urls["source_url_key"])).select(["request_id", "source_url", "source_url_key"])
        # A URL has a row per key it may be stored under; by its text it is one name.
        named_urls = urls.select(["request_id", "source_url"]).group_by(["request_id", "source_url"], use_threads=False).aggregate([])
        joined = [_small_join(named_urls, legacy, "source_url")]
        if by_key.num_rows:
            joined.append(_small_join(by_key, keyed, "source_url_key").select(joined[0].column_names))
        found = pa.concat_tables(joined)
        out.append(_match_rows(found, "url"))
        missing = named_urls.join(
            found.select(["request_id", "source_url"]), ["request_id", "source_url"], join_type="left anti", use_threads=False
        )
        # The audit table names what did not match: never a credential a request carried.
        names = [f"url {redact_url(u)}" for u in missing["source_url"].to_pylist()]
        unmatched.append(pa.table({"request_id": missing["request_id"], "name": pa.array(names, pa.string())}))
    domains = named["domains"]
    if domains.num_rows:
        # One regex pass (RE2: linear in the URL bytes) picks the rows on any listed domain;
        # only those are split into host suffixes and joined with the request names.
        listed = sorted(set(domains["domain"].to_pylist()))
        pattern = (
            r"^[A-Za-z][A-Za-z0-9+.\-]*://(?:[^@/?#]*@)?(?:[^/?#:]*\.)?(?:" + "|".join(_re_escape(d) for d in listed) + r")(?:[:/?#]|$)"
        )
        on_domain = corpus.filter(pc.fill_null(pc.match_substring_regex(corpus["source_url"], pattern, ignore_case=True), False))
        suffixes = host_suffixes(on_domain).join(
            on_domain.select(["sample_id", "source"]), "sample_id", join_type="inner", use_threads=False
        )
        out.append(_match_rows(domains.join(suffixes, "domain", join_type="inner", use_threads=False), "domain"))
        missing = domains.join(suffixes.select(["domain"]), "domain", join_type="left anti", use_threads=False)
        unmatched.append(
            pa.table({"request_id": missing["request_id"], "name": pc.binary_join_element_wise("domain ", missing["domain"], "")})
        )
    empty_unmatched = pa.table({"request_id": pa.array([], pa.string()), "name": pa.array([], pa.string())})
    matches = pa.concat_tables(out) if out else OPTOUT_MATCH_SCHEMA.empty_table()
    return matches, (pa.concat_tables([u.cast(empty_unmatched.schema) for u in unmatched]) if unmatched else empty_unmatched)


# Fingerprints -------------------------------------------------------------------------------
def fingerprints_of_samples(matches: pa.Table, raw: pa.Table, exported: pa.Table | None = None) -> pa.Table:
    """The fingerprints (hash unless degenerate, and content key) of every matched sample, in
    its current row and as exported: what keeps a copy excluded after the row loses its bytes."""
    if matches.num_rows == 0:
        return FINGERPRINT_SCHEMA.empty_table()
    pairs = matches.select(["request_id", "sample_id"])
    rows = _small_join(pairs, raw.select(["sample_id", "phash", "degenerate", "image_sha256"]), "sample_id")
    degenerate = pc.fill_null(rows["degenerate"], False)
    parts = [
        pa.table(
            {
                "request_id": rows["request_id"],
                "sample_id": rows["sample_id"],
                "phash": pc.if_else(degenerate, pa.scalar(None, pa.int64()), rows["phash"]),
                "sha256": rows["image_sha256"],
            }
        )
    ]
    if exported is not None and exported.num_rows:
        flat = set(rows.filter(degenerate)["sample_id"].to_pylist())
        shipped = _small_join(pairs, exported.select(["sample_id", "phash"]), "sample_id")
        if flat:
            shipped = shipped.filter(pc.invert(pc.is_in(shipped["sample_id"], value_set=pa.array(sorted(flat), pa.string()))))
        parts.append(
            pa.table(
                {
                    "request_id": shipped["request_id"],
                    "sample_id": shipped["sample_id"],
                    "phash": shipped["phash"],
                    "sha256": pa.nulls(shipped.num_rows, pa.string()),
                }
            )
        )
    joined = pa.concat_tables([p.cast(parts[0].schema) for p in parts])
    n = joined.num_rows
    table = pa.table(
        {
            "request_id": joined["request_id"],
            "phash": joined["phash"],
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
    return (
        grouped.rename_columns(["request_id", "phash", "sha256", "max_distance", "origin"])
        .select(FINGERPRINT_SCHEMA.names)
        .cast(FINGERPRINT_SCHEMA)
    )


def match_fingerprints(fps: pa.Table, hashed: pa.Table, keyed: pa.Table | None = None) -> pa.Table:
    """Samples whose hash (within the fingerprint's radius) or content key equals a request's
    fingerprint. ``hashed``/``keyed``: from ``hashed_candidates`` / ``keyed_candidates``."""
    out = []
    if fps.num_rows == 0:
        return OPTOUT_MATCH_SCHEMA.empty_table()
    exact = fps.filter(pc.and_(pc.is_valid(fps["phash"]), pc.equal(fps["max_distance"], 0)))
    if exact.num_rows and hashed.num_rows:
        joined = _small_join(exact.select(["request_id", "phash", "origin"]), hashed, "phash")
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
    keys = fps.filter(pc.is_valid(fps["sha256"]))
    if keyed is not None and keys.num_rows and keyed.num_rows:
        joined = _small_join(keys.select(["request_id", "sha256", "origin"]), keyed, "sha256")
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
    keyed = keyed.sort_by(
        [
            ("request_id", "ascending"),
            ("sample_id", "ascending"),
            ("_rank", "ascending"),
            ("_distance", "ascending"),
            ("matched_by", "ascending"),
        ]
    )
    req = keyed["request_id"].combine_chunks()
    sid = keyed["sample_id"].combine_chunks()
    n = keyed.num_rows
    first = np.ones(n, dtype=bool)
    if n > 1:
        same = pc.and_(pc.equal(req[1:], req[:-1]), pc.equal(sid[1:], sid[:-1])).to_numpy(zero_copy_only=False)
        first[1:] = ~same
    return keyed.filter(pa.array(first)).select(OPTOUT_MATCH_SCHEMA.names)


__all__ = [
    "exported_rows",
    "hashed_candidates",
    "keyed_candidates",
    "fingerprints_of_samples",
    "host_suffixes",
    "match_fingerprints",
    "match_identity",
    "named_tables",
    "one_match_per_sample",
    "raw_rows",
    "unique_fingerprints",
]
