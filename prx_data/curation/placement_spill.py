"""The corpus's placements on local disk by bucket, for the fold policy's plan.

The plan needs, per bucket, how many placements no skip row names, and the placements of the
sparse buckets it folds (fewer than ``min_stream_samples`` each). Spilled by bucket
(``<tier>/<HxW>``, the key the skip rows are spilled by), it reads one bucket's placements and
skip rows at a time instead of every placement of the corpus (``curation.fold``). The folder is
the caller's (a temporary directory), removed by it.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from prx_data.core.spill import PartitionFiles


def bucket_rels(placements: pa.Table) -> pa.Array:
    """``<tier>/<bucket>`` of every placement: the bucket's path in the MDS tree."""
    rel = pc.binary_join_element_wise(pc.cast(placements["tier"], pa.string()), placements["bucket"], "/")
    return rel.combine_chunks() if isinstance(rel, pa.ChunkedArray) else rel


class SpilledPlacements:
    """Placements with a shard, added batch by batch (``add``) and read back a bucket at a time
    once ``close``d. ``bucket_names`` keeps the order buckets were first seen in, as a group-by
    over the whole table would (the fold plan breaks ties by it)."""

    def __init__(self, folder: str, schema: pa.Schema):
        self._files = PartitionFiles(folder, schema)
        self._buckets: dict[str, int] = {}

    def add(self, table: pa.Table) -> None:
        table = table.filter(pc.is_valid(table["shard"]))  # never placed: in no bucket
        if not table.num_rows:
            return
        encoded = pc.dictionary_encode(bucket_rels(table))
        codes = np.array([self._buckets.setdefault(rel, len(self._buckets)) for rel in encoded.dictionary.to_pylist()], np.int64)
        self._files.split(table, codes[encoded.indices.to_numpy(zero_copy_only=False)])

    def close(self) -> SpilledPlacements:
        self._files.close()
        return self

    def bucket_names(self) -> list[str]:
        return list(self._buckets)

    def bucket(self, name: str) -> pa.Table:
        code = self._buckets.get(name)
        if code is None:
            assert self._files.schema is not None  # given at construction
            return self._files.schema.empty_table()
        return self._files.read(code)


__all__ = ["SpilledPlacements", "bucket_rels"]
