"""Look rows up by key in an Arrow table sorted once: binary searches in Arrow's C++, no Python
object per row. A whole source's keys cost their Arrow bytes (about 40 B for a 32-hex sample id),
where a Python dict or set of the same ids costs about 200 B each."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc


class SortedKeys:
    """``table`` sorted by its unique ``key`` column, for :meth:`positions`, :meth:`contains`
    and :meth:`get` on many keys at once."""

    def __init__(self, table: pa.Table, key: str = "sample_id") -> None:
        # large_string: a single chunk of 60M 32-character ids passes int32 offsets' 2 GiB.
        table = table.set_column(table.schema.get_field_index(key), key, table.column(key).cast(pa.large_string()))
        self.key = key
        self.table = table.take(pc.sort_indices(table, [(key, "ascending")])).combine_chunks()
        self._keys = self.table.column(key).chunk(0) if self.table.num_rows else pa.array([], pa.large_string())

    def __len__(self) -> int:
        return self.table.num_rows

    def positions(self, keys: pa.Array | pa.ChunkedArray) -> pa.Array:
        """Row of each key in :attr:`table`, null where the key is absent."""
        keys = keys.cast(pa.large_string())
        if isinstance(keys, pa.ChunkedArray):
            keys = keys.combine_chunks()
        if len(self._keys) == 0:
            return pa.nulls(len(keys), pa.int64())
        at = pc.min_element_wise(pc.search_sorted(self._keys, keys).cast(pa.int64()), len(self._keys) - 1)
        found = pc.fill_null(pc.equal(self._keys.take(at), keys), False)
        return pc.if_else(found, at, pa.scalar(None, pa.int64()))

    def contains(self, keys: pa.Array | pa.ChunkedArray) -> pa.Array:
        return pc.is_valid(self.positions(keys))

    def get(self, keys: pa.Array | pa.ChunkedArray, column: str) -> pa.Array:
        """``column``'s value for each key, null where the key is absent."""
        return self.table.column(column).take(self.positions(keys)).combine_chunks()


__all__ = ["SortedKeys"]
