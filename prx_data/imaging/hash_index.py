"""Near-duplicate search over 64-bit perceptual hashes: multi-index hashing, numpy only.

Two hashes are near duplicates when their Hamming distance is at most ``radius`` (k). Comparing
every pair is quadratic; multi-index hashing (Norouzi, Punjani & Fleet, 2012) is not. Split the
64 bits into ``m`` blocks: if two hashes differ in at most k bits, at least one block differs
in at most ``k // m`` bits (pigeonhole). So each hash only needs the rows whose block value is
within ``k // m`` bits of its own in some block: a sorted array per block and ``searchsorted``
find them, and every candidate is then verified on all 64 bits, so results are exact.

With ``m = k + 1`` blocks the per-block radius is 0 (exact block match, no enumeration). That
is fastest while blocks stay long enough to be selective; at large ``n`` and ``k`` blocks get
short and each bucket holds many rows. The auto choice follows the paper: blocks of about
``log2(n)`` bits (``m ~ 64 / log2 n``, at most ``k + 1``), enumerating the ``k // m``-bit
neighbours of each block when ``m < k + 1``. At a billion hashes that is 2 blocks of 32 bits,
so a query touches a handful of candidates for small ``k`` instead of millions.

Identical hashes are collapsed first (a cluster of byte copies costs one node, not n^2 pairs).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from itertools import combinations

import numpy as np

_U64 = np.uint64
_TABLE_BITS = 24  # blocks up to this width get a dense table of run starts (128 MB at most)
_MAX_PROBES = 50_000  # neighbours enumerated per block and query
MAX_RADIUS = 32  # beyond this a 64-bit perceptual hash no longer means "the same picture"


def as_uint64(hashes) -> np.ndarray:
    """Signed int64 (as stored in Lance) or unsigned values -> uint64 with the same bits."""
    arr = np.asarray(hashes)
    if arr.dtype == np.uint64:
        return arr
    if arr.dtype.kind in "iu":
        return arr.astype(np.int64, copy=False).view(np.uint64)
    if arr.dtype == object:  # Python ints, possibly >= 2**63
        return np.array([int(v) & 0xFFFFFFFFFFFFFFFF for v in arr.ravel()], dtype=np.uint64).reshape(arr.shape)
    raise TypeError(f"hashes must be integers, got dtype {arr.dtype}")


def hamming(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Element-wise Hamming distance of two uint64 arrays."""
    return np.bitwise_count(np.bitwise_xor(a, b)).astype(np.int64)


def _check_radius(radius: int) -> int:
    radius = int(radius)
    if not 0 <= radius <= MAX_RADIUS:
        raise ValueError(f"radius must be in 0..{MAX_RADIUS}, got {radius}")
    return radius


def _num_masks(width: int, radius: int) -> int:
    return sum(math.comb(width, r) for r in range(radius + 1))


def search_cost(n: int, radius: int, num_blocks: int) -> float:
    """Expected work per query: probes (one per neighbour of each block) plus candidates
    (uniform hashes: ``n / 2**width`` rows share a block value)."""
    cost = 0.0
    for _, width in block_layout(num_blocks):
        probes = _num_masks(width, radius // num_blocks)
        cost += probes * (1.0 + n / 2.0**width)
    return cost


def auto_blocks(n: int, radius: int) -> int:
    """The number of blocks (1..radius+1) with the least expected work per query: blocks of
    about ``log2(n)`` bits, as the paper recommends, found by comparing costs."""
    radius = _check_radius(radius)
    return min(range(1, radius + 2), key=lambda m: (search_cost(n, radius, m), m))


def block_layout(num_blocks: int) -> list[tuple[int, int]]:
    """(shift, width) of each block, widths as even as possible, covering all 64 bits."""
    if not 1 <= num_blocks <= 64:
        raise ValueError(f"num_blocks must be in 1..64, got {num_blocks}")
    base, extra = divmod(64, num_blocks)
    layout, shift = [], 0
    for b in range(num_blocks):
        width = base + (1 if b < extra else 0)
        layout.append((shift, width))
        shift += width
    return layout


def _block(values: np.ndarray, shift: int, width: int) -> np.ndarray:
    if width == 64:
        return values
    return (values >> _U64(shift)) & _U64((1 << width) - 1)


def _flip_masks(width: int, radius: int) -> np.ndarray:
    """Every mask of at most ``radius`` set bits within ``width`` bits (0 first)."""
    masks = [0]
    for r in range(1, radius + 1):
        masks.extend(sum(1 << bit for bit in bits) for bits in combinations(range(width), r))
    return np.array(masks, dtype=np.uint64)


class HashIndex:
    """A multi-index over ``hashes`` for radius queries up to ``radius``."""

    def __init__(self, hashes, radius: int, num_blocks: int | None = None) -> None:
        self.hashes = as_uint64(hashes).ravel()
        self.radius = _check_radius(radius)
        n = len(self.hashes)
        self.num_blocks = num_blocks or auto_blocks(n, self.radius)
        if not 1 <= self.num_blocks <= self.radius + 1:
            raise ValueError(f"num_blocks must be in 1..radius+1 ({self.radius + 1}), got {self.num_blocks}")
        self.layout = block_layout(self.num_blocks)
        self.block_radius = self.radius // self.num_blocks
        probes = max(_num_masks(w, self.block_radius) for _, w in self.layout)
        if probes > _MAX_PROBES:
            raise ValueError(
                f"{self.num_blocks} block(s) at radius {self.radius} would probe {probes} neighbours per block: use more blocks"
            )
        # Per block: rows sorted by block value, and where each value's run starts. Short
        # blocks get a dense table of run starts (one lookup per probe); long ones (billions
        # of rows, 32-bit blocks) use binary search on the sorted values.
        self._blocks: list[tuple[np.ndarray, np.ndarray, np.ndarray | None]] = []
        for shift, width in self.layout:
            keys = _block(self.hashes, shift, width)
            order = np.argsort(keys, kind="stable")
            sorted_keys = keys[order]
            starts = None
            if width <= _TABLE_BITS:
                starts = np.zeros((1 << width) + 1, np.int64)
                np.cumsum(np.bincount(sorted_keys.astype(np.int64), minlength=1 << width), out=starts[1:])
            self._blocks.append((sorted_keys, order, starts))

    def __len__(self) -> int:
        return len(self.hashes)

    def _candidates(self, queries: np.ndarray, block: int, chunk: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """(query position, index row) for every row whose block ``block`` is within the
        per-block radius of the query's, chunked so memory stays bounded."""
        shift, width = self.layout[block]
        keys, order, starts = self._blocks[block]
        masks = _flip_masks(width, self.block_radius)
        qkeys = _block(queries, shift, width)
        for start in range(0, len(queries), chunk):
            q = qkeys[start : start + chunk]
            probe = (q[:, None] ^ masks[None, :]).ravel()
            if starts is not None:
                lo = starts[probe.astype(np.int64)]
                hi = starts[probe.astype(np.int64) + 1]
            else:
                lo = np.searchsorted(keys, probe, side="left")
                hi = np.searchsorted(keys, probe, side="right")
            counts = hi - lo
            hit = np.flatnonzero(counts)
            if len(hit) == 0:
                continue
            qpos = start + hit // len(masks)
            lo, counts = lo[hit], counts[hit]
            total = int(counts.sum())
            # Expand each [lo, hi) range into its positions without a Python loop.
            offsets = np.repeat(lo - (np.cumsum(counts) - counts), counts)
            positions = offsets + np.arange(total)
            yield np.repeat(qpos, counts), order[positions]

    def _first_block_match(self, a: np.ndarray, b: np.ndarray, block: int) -> np.ndarray:
        """True where ``block`` is the first block within the per-block radius, so a pair
        found through several blocks is reported once."""
        keep = np.ones(len(a), dtype=bool)
        for earlier in range(block):
            shift, width = self.layout[earlier]
            close = hamming(_block(a, shift, width), _block(b, shift, width)) <= self.block_radius
            keep &= ~close
        return keep

    def query(self, queries, radius: int | None = None, chunk: int = 1 << 15) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(query position, index row, distance) for every index row within ``radius``
        (default: the index's) of each query; each pair once."""
        radius = self.radius if radius is None else _check_radius(radius)
        if radius > self.radius:
            raise ValueError(f"this index answers radius <= {self.radius}, asked {radius}")
        queries = as_uint64(queries).ravel()
        out_q, out_r, out_d = [], [], []
        for block in range(self.num_blocks):
            for qpos, rows in self._candidates(queries, block, chunk):
                a, b = queries[qpos], self.hashes[rows]
                dist = hamming(a, b)
                keep = (dist <= radius) & self._first_block_match(a, b, block)
                out_q.append(qpos[keep])
                out_r.append(rows[keep])
                out_d.append(dist[keep])
        return _concat(out_q), _concat(out_r), _concat(out_d)

    def self_pairs(self, chunk: int = 1 << 15) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(i, j, distance) with i < j for every pair of indexed rows within the radius."""
        i, j, d = self.query(self.hashes, chunk=chunk)
        keep = i < j
        return i[keep], j[keep], d[keep]


def _concat(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts).astype(np.int64) if parts else np.empty(0, np.int64)


def near_pairs(hashes, radius: int, num_blocks: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(i, j, distance), i < j, sorted, for every pair of rows within ``radius`` (exact)."""
    values = as_uint64(hashes).ravel()
    radius = _check_radius(radius)
    uniq, inverse = np.unique(values, return_inverse=True)
    ui, uj, ud = HashIndex(uniq, radius, num_blocks).self_pairs()
    # Back from distinct values to rows: every row of value a pairs with every row of value b,
    # plus all pairs of rows that share one value (distance 0).
    members = _members(inverse, len(uniq))
    rows_i, rows_j, dist = [], [], []
    for a, b, d in zip(ui.tolist(), uj.tolist(), ud.tolist()):
        ra, rb = members[a], members[b]
        rows_i.append(np.repeat(ra, len(rb)))
        rows_j.append(np.tile(rb, len(ra)))
        dist.append(np.full(len(ra) * len(rb), d, np.int64))
    for rows in members:
        if len(rows) > 1:
            a, b = np.triu_indices(len(rows), 1)
            rows_i.append(rows[a])
            rows_j.append(rows[b])
            dist.append(np.zeros(len(a), np.int64))
    i, j, d = _concat(rows_i), _concat(rows_j), _concat(dist)
    lo, hi = np.minimum(i, j), np.maximum(i, j)
    order = np.lexsort((hi, lo))
    return lo[order], hi[order], d[order]


def _members(inverse: np.ndarray, n_values: int) -> list[np.ndarray]:
    order = np.argsort(inverse, kind="stable")
    bounds = np.searchsorted(inverse[order], np.arange(n_values + 1))
    return [order[bounds[v] : bounds[v + 1]] for v in range(n_values)]


def brute_force_pairs(hashes, radius: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The quadratic reference (i < j, sorted): for tests and the benchmark baseline."""
    values = as_uint64(hashes).ravel()
    radius = _check_radius(radius)
    out_i, out_j, out_d = [], [], []
    for i in range(len(values) - 1):
        d = hamming(values[i + 1 :], values[i])
        j = np.flatnonzero(d <= radius)
        out_i.append(np.full(len(j), i, np.int64))
        out_j.append(j + i + 1)
        out_d.append(d[j])
    return _concat(out_i), _concat(out_j), _concat(out_d)


def cluster_ids(hashes, radius: int, groups=None, num_blocks: int | None = None) -> np.ndarray:
    """Per row, the id of its near-duplicate cluster: connected components of "within
    ``radius``" (transitively), only between rows of the same ``groups`` value. The id is the
    smallest row index of the cluster, so ids are stable under a fixed row order and a row
    alone is its own cluster. ``radius=0`` gives exact-equality clusters.
    """
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    values = as_uint64(hashes).ravel()
    radius = _check_radius(radius)
    n = len(values)
    group_keys = np.zeros(n, np.int64) if groups is None else np.asarray(groups).ravel()
    if len(group_keys) != n:
        raise ValueError(f"{n} hashes but {len(group_keys)} group keys")
    if n == 0:
        return np.empty(0, np.int64)
    # Nodes are distinct (group, hash) values; rows of one value are one node already.
    _, group_codes = np.unique(group_keys, return_inverse=True)
    order = np.lexsort((values, group_codes))
    g_sorted, v_sorted = group_codes[order], values[order]
    new_node = np.r_[True, (g_sorted[1:] != g_sorted[:-1]) | (v_sorted[1:] != v_sorted[:-1])]
    node_of_sorted = np.cumsum(new_node) - 1
    inverse = np.empty(n, np.int64)
    inverse[order] = node_of_sorted
    node_groups, node_values = g_sorted[new_node], v_sorted[new_node]
    edges_a, edges_b = [], []
    if radius > 0:
        bounds = np.flatnonzero(np.r_[True, node_groups[1:] != node_groups[:-1], True])
        for s, e in zip(bounds[:-1], bounds[1:]):
            i, j, _ = HashIndex(node_values[s:e], radius, num_blocks).self_pairs()
            edges_a.append(i + s)
            edges_b.append(j + s)
    a, b = _concat(edges_a), _concat(edges_b)
    m = len(node_values)
    graph = coo_matrix((np.ones(len(a), np.int8), (a, b)), shape=(m, m))
    _, component = connected_components(graph, directed=False)
    node_component = component[inverse]
    # Smallest row index per component, so the id means something outside this call.
    first_row = np.full(component.max() + 1 if m else 0, n, np.int64)
    np.minimum.at(first_row, node_component, np.arange(n))
    return first_row[node_component]


__all__ = [
    "MAX_RADIUS",
    "HashIndex",
    "as_uint64",
    "auto_blocks",
    "search_cost",
    "block_layout",
    "brute_force_pairs",
    "cluster_ids",
    "hamming",
    "near_pairs",
]
