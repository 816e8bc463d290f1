"""A spec whose ``root:`` reaches beyond the spec's own folder: allowed (a shared image folder
beside the specs), but said out loud, since every file under that root becomes readable by the
source's paths (``root: /`` lets ``image_kind: path`` rows name any file the process can read)."""

from __future__ import annotations

from prx_data.ingest.registry import RegisteredSource


def wide_root_warning(source: RegisteredSource) -> str | None:
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
