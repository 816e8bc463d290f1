"""A second process for the table-lock tests: ``python -m prx_data_tests.deploy.lock_worker ACTION ...``.

- ``hold URI``: take the lock, print ``held``, then wait until stdin closes (or the process is killed).
- ``try URI WAIT_S``: take the lock waiting at most WAIT_S seconds; print ``got`` or the error.
- ``pipeline SPEC_DIR``: ingest the one source of the registry in SPEC_DIR, hash it and export it
  (executor 'local'), with roots and credentials from the environment (PRX_*); print ``done``.
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    action = argv[0]
    if action in ("hold", "try"):
        from prx_data.core.locking import TableLocked, configure, table_lock
        from prx_data.core.settings import get_settings

        configure(get_settings().lock_policy())  # PRX_LOCK_TTL_S from the test's environment
        options = get_settings().storage_options
        wait = float(argv[2]) if action == "try" else 5.0
        try:
            with table_lock(argv[1], options, purpose=f"lock_worker {action}", wait_s=wait):
                print("held" if action == "hold" else "got", flush=True)
                if action == "hold":
                    sys.stdin.read()
        except TableLocked as exc:
            print(f"locked: {exc}", flush=True)
            return 3
        return 0
    if action == "pipeline":
        from prx_data.core.locking import configure
        from prx_data.core.paths import StoragePaths
        from prx_data.core.settings import get_settings
        from prx_data.ingest.driver import ingest_source
        from prx_data.ingest.registry import load_registry
        from prx_data.stages.export_stage import export_source
        from prx_data.stages.phash_stage import compute_phashes

        settings = get_settings()
        configure(settings.lock_policy())
        paths = StoragePaths.from_settings(settings)
        (source,) = load_registry(argv[1]).sources.values()
        uri = paths.raw_table(source.name)
        options = settings.storage_options
        ingest_source(source, uri, storage_options=options)
        compute_phashes(uri, executor="local", storage_options=options)
        export_source(
            uri,
            source.name,
            mds_root=settings.mds_root,
            exports_uri=paths.exports_table(source.name),
            executor="local",
            require_caption=False,
            storage_options=options,
        )
        print("done", flush=True)
        return 0
    raise SystemExit(f"unknown action {action!r}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
