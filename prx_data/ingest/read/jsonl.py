"""JSONL sources: each line as an item (capped while read), and the runs of lines a big file
is split into for several units."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path, PurePath
from typing import cast

from prx_data.core.schema import Status
from prx_data.ingest.read.contained import AnyRoot, open_contained
from prx_data.ingest.read.raw_item import RawItem
from prx_data.ingest.read.records import INVALID_RECORD, SIDECAR_MAX_BYTES, record_to_item
from prx_data.ingest.read.source_files import ReadContext, file_error, list_files, make_root
from prx_data.ingest.registry import SourceSpec

_SCAN_BLOCK = 4 * 1024 * 1024
_LINE_PIECE = 1024 * 1024


def _jsonl_lines(handle, limit: int, first_line: int = 0, length: int | None = None) -> Iterator[tuple[int, bytes | None]]:
    """(line number, bytes) per line; None for a line longer than ``limit`` (skipped unread).
    ``length``: read only the lines that start within that many bytes (a unit's byte range).

    A line is read in pieces of ``_LINE_PIECE``: a longer one is measured first, without its
    bytes being kept, and read only once it is known to fit, so a line over the limit never
    costs more memory than a piece (the handle seeks back; one that cannot keeps the pieces)."""
    line_no = first_line
    read = 0
    piece = min(limit + 1, _LINE_PIECE)
    seekable = handle.seekable()
    while length is None or read < length:
        line = handle.readline(piece)
        if not line:
            return
        read += len(line)
        line_no += 1
        size, last = len(line), line
        pieces: list[bytes] | None = None if seekable else [line]
        while not last.endswith(b"\n") and len(last) == piece:
            last = handle.readline(piece)
            read += len(last)
            size += len(last)
            if size > limit + 1:
                pieces = None  # over the limit: the rest is only skipped
            elif pieces is not None:
                pieces.append(last)
        if size - last.endswith(b"\n") > limit:
            yield line_no, None
        elif size == len(line):
            yield line_no, line
        elif pieces is not None:
            yield line_no, b"".join(pieces)
        else:
            handle.seek(handle.tell() - size)
            yield line_no, handle.read(size)


def read_jsonl(
    spec: SourceSpec, location: Path | str, root: AnyRoot | None = None, storage_options: dict | None = None
) -> Iterator[RawItem]:
    ctx = ReadContext(spec, location, root or make_root(spec, location, None, storage_options))
    for file in list_files(location, (".jsonl", ".json"), ctx.root):
        yield from read_jsonl_file(ctx, file)


def jsonl_line_limit(spec: SourceSpec) -> int:
    # A line carries at most one image as base64 plus its metadata.
    return spec.max_bytes * 4 // 3 + SIDECAR_MAX_BYTES


def read_jsonl_file(ctx: ReadContext, file: PurePath, byte_range: tuple[int, int] | None = None, first_line: int = 0) -> Iterator[RawItem]:
    """The file's items; ``byte_range`` (start, end) with the number of lines before ``start``
    reads one piece of a split file (see ``line_runs``): the lines that start in that range."""
    spec = ctx.spec
    limit = jsonl_line_limit(spec)
    handle, refused = open_contained(file, ctx.root)
    if handle is None:
        assert refused is not None, "open_contained says why it opened nothing"
        yield file_error(file, refused.status, refused.error)
        return
    with handle:
        # The handle is a raw file (os.fdopen, unbuffered) or an object-store stream: both have
        # the readinto a BufferedReader reads through, which BinaryIO does not declare.
        buffered = io.BufferedReader(cast(io.RawIOBase, handle))
        length = None
        try:
            if byte_range is not None:
                buffered.seek(byte_range[0])
                length = byte_range[1] - byte_range[0]
            for line_no, raw in _jsonl_lines(buffered, limit, first_line, length):
                position = f"{file.name}:{line_no}"
                if raw is None:
                    yield RawItem(
                        key=position,
                        error=f"line {line_no} of {file.name} is longer than {limit} bytes",
                        error_status=Status.TOO_LARGE.value,
                    )
                    continue
                try:
                    line = raw.decode("utf-8-sig" if line_no == 1 else "utf-8")
                except UnicodeDecodeError as exc:
                    yield RawItem(
                        key=position,
                        error=f"line {line_no} of {file.name} is not UTF-8: {exc.reason} at byte {exc.start}",
                        error_status=INVALID_RECORD,
                    )
                    continue
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except (json.JSONDecodeError, RecursionError) as exc:
                    msg = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
                    yield RawItem(key=position, error=f"line {line_no} of {file.name} is not JSON: {msg}", error_status=INVALID_RECORD)
                    continue
                if not isinstance(record, dict):
                    yield RawItem(key=position, error=f"line {line_no} of {file.name} is not an object", error_status=INVALID_RECORD)
                    continue
                yield record_to_item(record, ctx, file.parent, position)
        except OSError as exc:
            yield file_error(file, Status.UNREADABLE.value, f"cannot read {file.name}: {exc}")


def line_runs(file, root: AnyRoot, lines: int) -> list[tuple[int, int, int]] | None:
    """(start, end, lines before start) for runs of ``lines`` lines; None to read the file whole
    (it holds fewer lines, or cannot be opened: its reader then yields the file's error row).
    Splits fall right after a newline, where the reader's lines start too, so the pieces'
    items are exactly the whole file's, with the same line numbers."""
    handle, _ = open_contained(file, root)
    if handle is None:
        return None
    runs, start, before, count, offset = [], 0, 0, 0, 0
    try:
        with handle:
            while block := handle.read(_SCAN_BLOCK):
                at = 0
                while True:
                    need = lines - count
                    # Find the need-th newline of this block from ``at``, or count them all.
                    pos = at - 1
                    for _ in range(need):
                        pos = block.find(b"\n", pos + 1)
                        if pos < 0:
                            break
                    if pos < 0:
                        count += block.count(b"\n", at)
                        break
                    end = offset + pos + 1
                    runs.append((start, end, before))
                    start, before, count, at = end, before + lines, 0, pos + 1
                offset += len(block)
    except OSError:
        return None
    if offset > start:
        runs.append((start, offset, before))
    return runs if len(runs) > 1 else None
