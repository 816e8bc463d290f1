"""``prx-data``: the command line. Heavy imports happen inside each command."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import warnings
from collections import Counter
from datetime import UTC
from pathlib import Path

from prx_data.app.local_ray import starting_local_ray
from prx_data.app.ui import install_config, serve_ui
from prx_data.app.view_commands import add_parsers as add_view_parsers
from prx_data.core.native_memory import cap_malloc_arenas
from prx_data.core.ray_tasks import connection_held, prefetch_ray, ray_provider
from prx_data.core.reasons import reason_code


class MissingDataRoot(ValueError):
    """``--root`` names no folder: most often a typo, which would otherwise become a new, empty
    data root (a Dagster home, empty tables) and a run that succeeds on nothing."""


def _use_data_root(root: Path, create: bool = False) -> None:
    """Point settings and Dagster at ``root`` (before anything reads them). Only ``demo`` creates it."""
    if not create and not root.is_dir():
        raise MissingDataRoot(
            f"data root {root} does not exist: check --root, or make it with a sources/ folder of specs "
            f"(README, Sources), or `prx-data demo --root {root}` for a demo corpus"
        )
    # lazy: pulls in pyarrow, numpy, pydantic
    from prx_data.core.settings import get_settings

    os.environ["PRX_DATA_ROOT"] = str(root)
    home = Path(os.environ.get("DAGSTER_HOME") or root / ".dagster")
    home.mkdir(parents=True, exist_ok=True)
    # lazy: pulls in pyarrow, numpy
    from prx_data.core import locking

    with locking.dagster_home_lock(str(home)):  # another run may be setting up the same new root
        # The run limits and the GPU pool; a dagster.yaml already in the home is the user's.
        install_config(home, "dagster.yaml", overwrite=False)
    os.environ["DAGSTER_HOME"] = str(home)
    get_settings.cache_clear()


def _summary(sources: list[str]) -> str:
    import lance

    # lazy: pulls in lance, pandas, pyarrow
    from prx_data.core.lance_io import open_table
    from prx_data.core.paths import StoragePaths
    from prx_data.core.settings import get_settings

    settings = get_settings()
    paths = StoragePaths.from_settings(settings)
    lines = ["", "Summary", "======="]
    for source in sources:
        uri = paths.raw_table(source)
        ds = open_table(uri, settings.storage_options)
        if ds is None:
            lines.append(f"{source:>10}: no table (the run failed; see above)")
            continue
        statuses = Counter(ds.to_table(columns=["status"]).column("status").to_pylist())
        status_text = ", ".join(f"{k}={v}" for k, v in sorted(statuses.items()))
        lines.append(f"{source:>10}: {ds.count_rows():5d} rows ({status_text})  fragments={len(ds.get_fragments())} version={ds.version}")
        lines.append(f"{'':>10}  {uri}")
        extra = [c for c in ("phash", "caption", "label") if c in ds.schema.names]
        if "caption_model" in ds.schema.names:
            models = Counter(ds.to_table(columns=["caption_model"]).column("caption_model").to_pylist())
            lines.append(f"{'':>10}  caption models: {dict(models)}")
        if extra:
            lines.append(f"{'':>10}  derived columns: {', '.join(extra)}")
    lines.extend(_corpus_summary(paths, settings, sources))
    lines.append(f"Lance root: {settings.lance_root}")
    lines.append(f"MDS root:   {settings.mds_root}")
    del lance
    return "\n".join(lines)


def _corpus_summary(paths, settings, sources: list[str]) -> list[str]:
    """Exported / dropped per source, and what the skip lists exclude."""

    # lazy: pulls in lance, pandas, pyarrow
    from prx_data.core.lance_io import open_table

    lines = ["", "Export (MDS)"]
    for source in sources:
        ds = open_table(paths.exports_table(source), settings.storage_options)
        if ds is None:
            continue
        t = ds.to_table(columns=["shard", "drop_reason"])
        exported = t.num_rows - t.column("shard").null_count
        drops = Counter(reason_code(r) for r in t.column("drop_reason").to_pylist() if r)
        lines.append(f"{source:>10}: exported={exported} dropped={dict(sorted(drops.items()))}")
    # lazy: pulls in pyarrow, numpy
    from prx_data.core.storage import is_file, locate
    from prx_data.export.skiplist import iter_root_sidecars
    from prx_data.export.tree import INDEX_BASENAME, list_buckets

    skipped: Counter = Counter()
    for sidecar in iter_root_sidecars(settings.mds_root, settings.storage_options):
        skipped[sidecar.reason.split(":")[0] if sidecar.reason.startswith("optout") else sidecar.reason] += len(sidecar.indices)
    # Published = has an index.json (what training.loader.published_buckets lists), read without
    # importing the loader, whose `streaming` import costs seconds.
    buckets = [
        ref
        for ref in list_buckets(settings.mds_root, settings.storage_options)
        if is_file(locate(ref.dir(settings.mds_root), settings.storage_options).child(INDEX_BASENAME))
    ]
    lines.append(f"{'':>10}  {len(buckets)} published bucket streams; skipped by reason: {dict(sorted(skipped.items()))}")
    return lines


def _ui_hint() -> str:
    root = os.environ.get("PRX_DATA_ROOT") or str(Path("data").resolve())
    return f"\nOpen the Dagster UI on this data:\n  .venv/bin/prx-data ui          # or: prx-data ui --root {root}\n"


def _state_file() -> Path:
    """Where the last ``demo`` / ``run`` records its data root, for ``prx-data ui``."""
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "prx-data" / "last_run.json"


def _remember_data_root() -> None:
    import json

    state = _state_file()
    try:
        state.parent.mkdir(parents=True, exist_ok=True)
        # lazy: pulls in pyarrow, numpy, pydantic
        from prx_data.core.settings import get_settings

        root = get_settings().data_root
        # lazy: pulls in pyarrow, numpy
        from prx_data.core.storage import resolve_root

        root = resolve_root(root)
        state.write_text(json.dumps({"data_root": root, "dagster_home": os.environ.get("DAGSTER_HOME")}))
    except OSError:
        pass  # a read-only home: `prx-data ui --root` still works


def cmd_demo(args: argparse.Namespace) -> int:
    root = Path(args.root).resolve()
    if args.fresh and root.exists():
        shutil.rmtree(root)
    _use_data_root(root, create=True)
    # lazy: pulls in PIL, pyarrow, numpy
    from prx_data.demo.corpus import build_demo_corpus

    if not (root / "sources").exists() or not any((root / "sources").glob("*.yaml")):
        print(f"Building the demo corpus in {root} ...")
        build_demo_corpus(root)
    return _run_everything(args)


def cmd_run(args: argparse.Namespace) -> int:
    if args.root:
        _use_data_root(Path(args.root).resolve())
    return _run_everything(args)


def _run_everything(args: argparse.Namespace) -> int:
    from prx_data.app.run_plan import plan_run, record_corpus, record_sources

    # lazy: pulls in tqdm
    from prx_data.core.progress import enable_bars
    from prx_data.core.settings import get_settings
    from prx_data.ingest.ownership import SpecOwners
    from prx_data.ingest.registry import load_registry

    enable_bars()  # drawn only when stderr is a terminal
    settings = get_settings()
    registry = load_registry(settings.sources_dir, SpecOwners.of(settings))
    for error in registry.errors:
        print(f"bad source spec (skipped): {error}")
    unknown = sorted(set(args.source or ()) - set(registry.sources))
    if unknown:
        # A misspelt --source would otherwise run nothing and report success.
        known = ", ".join(sorted(registry.sources)) or "none"
        print(f"no source named {', '.join(map(repr, unknown))} in {settings.sources_dir} (sources: {known})", file=sys.stderr)
        return 2
    sources = [s for s in registry.sources if not args.source or s in args.source]
    plan = plan_run(settings, registry, sources, force=getattr(args, "force", False))
    for source in plan.unchanged:
        print(f"[{source}] inputs unchanged since its last successful run: skipped (--force runs it)")
    if plan.to_run:
        # Before Dagster's imports: a new URL source's first images download meanwhile.
        # lazy: only for a command with a source to ingest
        from prx_data.ingest.early_downloads import drop_unclaimed, start_first_downloads

        first = plan.to_run[0]
        start_first_downloads(registry.get(first), plan.paths.raw_table(first), settings.storage_options or None, settings.ingest_workers)

    outcome: dict[str, bool] = {}
    corpus_ok = True
    if plan.to_run or plan.corpus_needed():
        # lazy: Dagster and the Definitions (1-2 s), only for a command with work to do
        from prx_data.defs.build import build_defs
        from prx_data.defs.orchestrate import materialize_corpus, materialize_sources, open_instance

        # One Ray for the whole command: every source's run and every step that needs Ray joins
        # it. It starts when a stage first submits Ray work (core.ray_tasks.ensure_ray), or in the
        # background: at once when the sources' listings grew by more rows than the stages do
        # locally (RunPlan.expects_ray), else once ingest has written that many (prefetch_ray).
        # A command whose runs have little to do starts none.
        # The first run that joins it keeps its connection for the others (connection_held), so
        # they find the Ray workers already up, with their imports and models.
        with (
            starting_local_ray(records_dir=_ray_records_dir(), lazy=True) as ray_head,
            ray_provider("start", ray_head.wait_or_fail),
            ray_provider("prefetch", ray_head.prefetch),
            connection_held(),
        ):
            if plan.expects_ray(settings.local_max_rows):
                prefetch_ray()
            with open_instance(sources) as instance:
                defs = build_defs()  # resources read PRX_RAY_ADDRESS when built
                force = getattr(args, "force", False)
                outcome = materialize_sources(defs, instance, plan.to_run, _workspace_file(), reread_unchanged=force)
                if plan.to_run:
                    drop_unclaimed()
                if outcome and not any(outcome.values()):
                    # Corpus-wide assets over sources that all failed would only fail the same
                    # way, or publish what is already published.
                    print("[corpus] skipped: every source run failed")
                elif plan.corpus_needed(outcome):
                    corpus_ok = materialize_corpus(defs, instance, _workspace_file())
                else:
                    print("[corpus] inputs unchanged since the last corpus run: skipped")
        # After the corpus assets, which may write the sources' tables (the fold policy): the
        # records hold the versions this command leaves.
        record_sources(plan, outcome, settings)
        if corpus_ok and (not outcome or any(outcome.values())) and plan.corpus_needed(outcome):
            record_corpus(plan, settings)
    else:
        print("[corpus] inputs unchanged since the last corpus run: skipped")
    _remember_data_root()
    print(_summary(sources))
    print(_ui_hint())
    failed = [s for s, ok in outcome.items() if not ok]
    if failed or not corpus_ok:
        print(f"FAILED: {', '.join(failed) or 'corpus assets'}")
        return 1
    return 0


def _workspace_file() -> Path:
    """The workspace `prx-data ui` serves (package data): the CLI's runs are recorded as runs of
    its code location's jobs, so the UI lists them with its own (Overview timeline included)."""
    from importlib.resources import files

    return Path(str(files("prx_data.app") / "resources" / "workspace.yaml"))


def _ray_records_dir() -> Path:
    """Where this command records its Ray head (a local folder; under the data root's Dagster
    home by default), so the next command on the root stops a head this one left."""
    from prx_data.app.local_ray import RECORDS_DIR

    home = os.environ.get("DAGSTER_HOME")
    return Path(home) / RECORDS_DIR if home else _state_file().parent / RECORDS_DIR


def cmd_ui(args: argparse.Namespace) -> int:
    import json

    if args.root:
        root, home = Path(args.root).resolve(), None
    elif os.environ.get("PRX_DATA_ROOT"):
        root, home = Path(os.environ["PRX_DATA_ROOT"]).resolve(), None
    else:
        try:
            last = json.loads(_state_file().read_text())
        except (OSError, ValueError):
            print("no data root: run `prx-data demo` or `prx-data run` first, or give --root", file=sys.stderr)
            return 2
        root, home = Path(last["data_root"]), last.get("dagster_home")
    if home and not os.environ.get("DAGSTER_HOME"):
        os.environ["DAGSTER_HOME"] = home
    _use_data_root(root)
    # lazy: pulls in Dagster
    from prx_data.defs.orchestrate import show_automation_on_in_home

    show_automation_on_in_home()
    return serve_ui(root, Path(os.environ["DAGSTER_HOME"]), port=args.port, host=args.host)


def cmd_sources(args: argparse.Namespace) -> int:
    # lazy: pulls in pyarrow, numpy, pydantic
    from prx_data.core.settings import get_settings
    from prx_data.ingest.ownership import SpecOwners
    from prx_data.ingest.registry import load_registry, wide_root_warning

    if args.root:
        _use_data_root(Path(args.root).resolve())
    registry = load_registry(get_settings().sources_dir, SpecOwners.of(get_settings()))
    if args.action == "remove":
        return _remove_source(registry, args.name)
    for name, source in registry.sources.items():
        print(f"{name:>12}  {source.spec.shape:<12} priority={source.spec.priority:<4} {source.resolve_location()}")
        warning = wide_root_warning(source)
        if warning:
            print(f"WARNING {warning}")
    for error in registry.errors:
        print(f"ERROR {error}")
    return 1 if registry.errors else 0


def _remove_source(registry, name: str | None) -> int:
    """Move the spec aside (``.removed/``, not read by the registry) and retire the source now,
    as the registry sensor would: its export leaves training, its data is kept (docs/ui.md)."""
    # lazy: pulls in dagster and the definitions
    from datetime import datetime

    from prx_data.defs.build import build_defs
    from prx_data.defs.named_runs import execute_named_job, repository_origin
    from prx_data.defs.orchestrate import CLI_TAGS, open_instance

    if not name or name not in registry.sources:
        print(f"no valid source spec named {name!r}; registered: {', '.join(sorted(registry.sources)) or 'none'}")
        return 2
    spec = registry.sources[name].path
    aside = spec.parent / ".removed" / f"{spec.stem}.{datetime.now(UTC):%Y%m%dT%H%M%SZ}{spec.suffix}"
    aside.parent.mkdir(exist_ok=True)
    spec.rename(aside)
    print(f"spec moved to {aside}")
    with open_instance([]) as instance:
        defs = build_defs()
        result = execute_named_job(
            defs,
            "retire_source",
            instance,
            repository_origin(_workspace_file(), defs),
            tags={"prx/retire": name, **CLI_TAGS},
            run_config={"ops": {"retire": {"config": {"source": name, "reason": "prx-data sources remove"}}}},
        )
    print(
        f"[{name}] retired: out of training and of the partition set; data kept (see the data card)"
        if result.success
        else f"[{name}] retiring FAILED (run {result.run_id}); the spec is at {aside}"
    )
    return 0 if result.success else 1


def cmd_buckets(args: argparse.Namespace) -> int:
    # lazy: pulls in pydantic
    from prx_data.imaging.buckets import BucketConfig, shape_table

    cfg = BucketConfig(tiers=tuple(args.tiers)) if args.tiers else BucketConfig()
    print(shape_table(cfg))
    return 0


def _runs_lookup():
    # Dagster costs seconds to import: only imported when run details are asked for.
    # lazy: Dagster costs seconds to import
    from prx_data.defs import run_lookup

    return run_lookup.dagster_runs_lookup()


def cmd_lineage(args: argparse.Namespace) -> int:
    import json

    from prx_data.core.paths import StoragePaths
    from prx_data.core.settings import get_settings

    # lazy: pulls in lance, pandas, pyarrow
    from prx_data.curation.lineage import find, format_record
    from prx_data.ingest.ownership import SpecOwners
    from prx_data.ingest.registry import load_registry

    if args.root:
        _use_data_root(Path(args.root).resolve())
    settings = get_settings()
    if not any((args.id, args.url, args.key, args.image)):
        print("give --id, --url, --key or --image", file=sys.stderr)
        return 2
    try:
        records = find(
            StoragePaths.from_settings(settings),
            sorted(load_registry(settings.sources_dir, SpecOwners.of(settings)).sources),
            sample_id=args.id,
            url=args.url,
            source_key=args.key,
            image=args.image,
            max_hamming=args.distance,
            options=settings.storage_options,
            # Dagster costs seconds to import and query: only when run details are asked for.
            runs_lookup=_runs_lookup() if args.runs else None,
        )
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps([r.to_json() for r in records], indent=2, default=str))
    else:
        print("\n\n".join(format_record(r) for r in records) if records else "no sample matches")
    return 0 if records else 1


def cmd_optout_add(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from prx_data.core.settings import get_settings

    # lazy: pulls in pyarrow, numpy, pydantic
    from prx_data.curation.optout.files import read_image_file
    from prx_data.curation.optout.requests import OptOutRequest, write_request

    if args.root:
        _use_data_root(Path(args.root).resolve())
    try:
        for image in args.image or []:
            # Typed and capped now, so a FIFO or /dev/zero is refused here instead of being
            # filed and read by every later `optout apply`.
            read_image_file(image)
        request = OptOutRequest(
            id=args.id,
            requester_note=args.note or "",
            sample_ids=args.sample_id or [],
            urls=args.url or [],
            source_keys=args.key or [],
            image_files=[str(Path(p).resolve()) for p in args.image or []],
            domains=args.domain or [],
            max_hamming=args.distance,
        )
        if request.is_empty():
            raise ValueError("the request names nothing to remove")
        path = write_request(get_settings().optout_dir, request)
    except (ValidationError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"request {request.id} written to {path}; `prx-data optout apply` excludes it now (or the opt-out sensor does)")
    _warn_unknown_sources(request.source_keys)
    return 0


def _warn_unknown_sources(source_keys: list[str]) -> None:
    """A key whose source is not registered (most often a misspelt name) matches nothing: say so
    now, not only in the next apply's unmatched list. It stays filed: the source may come later."""
    from prx_data.core.settings import get_settings
    from prx_data.ingest.ownership import SpecOwners
    from prx_data.ingest.registry import load_registry

    known = set(load_registry(get_settings().sources_dir, SpecOwners.of(get_settings())).sources)
    unknown = sorted({key.split(":", 1)[0] for key in source_keys} - known)
    if unknown:
        print(
            f"warning: no source named {', '.join(map(repr, unknown))} is registered (sources: {', '.join(sorted(known)) or 'none'}); "
            "its keys match nothing until a source of that name is ingested",
            file=sys.stderr,
        )


def _registry_priorities(settings) -> dict[str, int]:
    # lazy: pulls in pydantic
    from prx_data.ingest.ownership import SpecOwners
    from prx_data.ingest.registry import load_registry

    registry = load_registry(settings.sources_dir, SpecOwners.of(settings))
    for error in registry.errors:
        print(f"bad source spec (skipped): {error}", file=sys.stderr)
    return {name: src.spec.priority for name, src in registry.sources.items()}


def cmd_optout_apply(args: argparse.Namespace) -> int:
    """Requests, skip lists and the data card only: nothing is re-exported."""
    # lazy: pulls in streaming (torch)
    from prx_data.core.paths import StoragePaths
    from prx_data.core.settings import EXCLUDE_LABELS, get_settings
    from prx_data.curation.fold import FoldPolicy
    from prx_data.curation.refresh import refresh

    if args.root:
        _use_data_root(Path(args.root).resolve())
    settings = get_settings()
    # lazy: pulls in pyarrow, numpy
    from prx_data.core.locking import configure

    configure(settings.lock_policy())  # the fold writes its tables under their locks
    if getattr(args, "withdraw_id", None):
        # lazy: pulls in lance
        from prx_data.curation.optout.withdraw import withdraw

        try:
            receipt = withdraw(
                StoragePaths.from_settings(settings), settings.optout_dir, args.withdraw_id, args.reason, settings.storage_options
            )
        except (KeyError, ValueError) as exc:
            print(f"error: {exc.args[0]}", file=sys.stderr)
            return 2
        print(
            f"request {args.withdraw_id} withdrawn ({receipt['reason']}); file(s) removed: "
            f"{', '.join(receipt['files_removed']) or 'none'}; receipt: prx-data optout report --id {args.withdraw_id}"
        )
    applied = refresh(
        StoragePaths.from_settings(settings),
        settings.optout_dir,
        _registry_priorities(settings),
        exclude_labels=tuple(args.exclude_label) if args.exclude_label is not None else EXCLUDE_LABELS,
        options=settings.storage_options,
        min_stream_samples=settings.min_stream_samples,
        dedup_radius=settings.dedup_radius,
        fold=FoldPolicy.from_settings(settings),
        views_dir=settings.views_dir,
        retention_s=settings.shard_retention_s,
    )
    report = applied.optouts
    for error in report.errors:
        # Nothing here shrinks the opt-outs: a request that failed keeps its last applied version.
        print(f"request not applied as filed: {error}", file=sys.stderr)
    for line, row in zip(report.summary_lines(), report.audit.to_pylist()):
        print(line)
        for problem in row["problems"]:
            print(f"  {problem}")
    if report.kept:
        print(
            f"{len(report.kept)} request(s) kept in force at their last applied version: {', '.join(sorted(report.kept))}", file=sys.stderr
        )
    print(
        f"applied {report.requests} request(s) in {applied.seconds:.2f}s: skip-list build {applied.build_id}, "
        f"{applied.skipped_samples} sample(s) skipped in all, {applied.sidecars_written} sidecar(s) written; "
        f"receipts: prx-data optout report --id ID"
    )
    return 1 if report.errors else 0


def _views_command(command):
    """A ``prx-data views`` command, given the settings of ``--root`` and the registry's priorities."""

    def run(args: argparse.Namespace) -> int:
        from prx_data.core.settings import get_settings

        if getattr(args, "root", None):
            _use_data_root(Path(args.root).resolve())
        settings = get_settings()
        return command(args, settings, lambda: _registry_priorities(settings))

    return run


def cmd_optout_report(args: argparse.Namespace) -> int:
    # lazy: pulls in lance, pandas, pyarrow
    from prx_data.core.paths import StoragePaths
    from prx_data.core.settings import get_settings
    from prx_data.curation.optout.receipt import receipt, to_json, to_markdown

    if args.root:
        _use_data_root(Path(args.root).resolve())
    settings = get_settings()
    try:
        r = receipt(StoragePaths.from_settings(settings), args.id, settings.storage_options)
    except KeyError as exc:
        print(f"error: {exc.args[0]}", file=sys.stderr)
        return 1
    print(to_json(r) if args.json else to_markdown(r), end="" if not args.json else "\n")
    return 0


def cmd_gc(args: argparse.Namespace) -> int:
    # lazy: pulls in pyarrow
    from prx_data.core.settings import get_settings
    from prx_data.export.retention import collect_all

    if args.root:
        _use_data_root(Path(args.root).resolve())
    settings = get_settings()
    days = settings.shard_retention_days if args.retention_days is None else args.retention_days
    if days < 0:
        print("error: --retention-days must be 0 or more", file=sys.stderr)
        return 2
    done = collect_all(settings.mds_root, settings.storage_options or None, retention_s=days * 86400.0)
    print(
        f"deleted {len(done.deleted)} object(s) that stopped being published more than {days:g} day(s) ago; "
        f"{done.retained} superseded object(s) kept inside the retention"
    )
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="prx-data", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="build the demo corpus and run the whole pipeline on it")
    demo.add_argument("--root", default=str(Path("data") / "demo"), help="default: ./data/demo")
    demo.add_argument("--fresh", action="store_true", help="delete the demo data first")
    demo.add_argument("--source", action="append", help="only these sources")
    demo.add_argument("--force", action="store_true", help="run every source even when its inputs are unchanged, opening every object")
    demo.set_defaults(func=cmd_demo)

    run = sub.add_parser("run", help="run the whole pipeline on the configured registry")
    run.add_argument("--root", help="data root (default: $PRX_DATA_ROOT or ./data)")
    run.add_argument("--source", action="append", help="only these sources")
    run.add_argument("--force", action="store_true", help="run every source even when its inputs are unchanged, opening every object")
    run.set_defaults(func=cmd_run)

    ui = sub.add_parser("ui", help="the Dagster UI on the data of the last demo / run (Ctrl-C stops it)")
    ui.add_argument("--root", help="data root (default: the last demo / run's)")
    ui.add_argument("--port", type=int, help="default: 3000 if free, else any free port")
    ui.add_argument("--host", default="127.0.0.1")
    ui.set_defaults(func=cmd_ui)

    sources = sub.add_parser("sources", help="list registered sources and bad specs; `sources remove NAME` retires one")
    sources.add_argument("action", nargs="?", choices=["list", "remove"], default="list")
    sources.add_argument("name", nargs="?", help="the source to remove")
    sources.add_argument("--root")
    sources.set_defaults(func=cmd_sources)
    buckets = sub.add_parser("buckets", help="print the bucket shapes per resolution tier")
    buckets.add_argument("--tiers", type=int, nargs="+", help="tiers (default 512 1024 2048 4096)")
    buckets.set_defaults(func=cmd_buckets)

    lineage = sub.add_parser("lineage", help="everything known about a sample: source row, captions, shards, skips, runs")
    lineage.add_argument("--id", help="sample id")
    lineage.add_argument("--url", help="source URL")
    lineage.add_argument("--key", help="'<source>:<key>'")
    lineage.add_argument("--image", help="an image file, matched by perceptual hash")
    lineage.add_argument("--distance", type=int, default=0, help="max Hamming distance for --image (default 0)")
    lineage.add_argument("--json", action="store_true")
    lineage.add_argument("--runs", action="store_true", help="also look up the Dagster runs of each asset (slower)")
    lineage.add_argument("--root")
    lineage.set_defaults(func=cmd_lineage)
    add_view_parsers(sub, _views_command)

    optout = sub.add_parser("optout", help="opt-out requests")
    optout_sub = optout.add_subparsers(dest="optout_command", required=True)
    add = optout_sub.add_parser("add", help="file a request in the opt-out folder")
    add.add_argument("--id", required=True)
    add.add_argument("--note", help="who asked, and how to answer them")
    add.add_argument("--sample-id", action="append")
    add.add_argument("--url", action="append")
    add.add_argument("--key", action="append", help="'<source>:<key>'")
    add.add_argument("--image", action="append", help="image file; every perceptual copy is covered")
    add.add_argument("--domain", action="append")
    add.add_argument("--distance", type=int, default=0)
    add.add_argument("--root")
    add.set_defaults(func=cmd_optout_add)
    apply = optout_sub.add_parser("apply", help="resolve every request and rebuild skip lists and the data card now (no re-export)")
    apply.add_argument("--exclude-label", action="append", help="labels the skip lists exclude (default: nsfw, text)")
    apply.add_argument("--root")
    apply.set_defaults(func=cmd_optout_apply)
    withdraw = optout_sub.add_parser(
        "withdraw",
        help="withdraw a request on purpose: its file is removed, a receipt is kept, the skip lists are rebuilt "
        "(the only way a filed request stops excluding samples)",
    )
    withdraw.add_argument("--id", dest="withdraw_id", required=True)
    withdraw.add_argument("--reason", required=True, help="why (kept in the receipt)")
    withdraw.add_argument("--exclude-label", action="append", help="labels the skip lists exclude (default: nsfw, text)")
    withdraw.add_argument("--root")
    withdraw.set_defaults(func=cmd_optout_apply)
    receipt = optout_sub.add_parser("report", help="a request's receipt: matches, sources, shards, rules, skip-list builds")
    receipt.add_argument("--id", required=True)
    receipt.add_argument("--json", action="store_true", help="JSON instead of Markdown")
    receipt.add_argument("--root")
    receipt.set_defaults(func=cmd_optout_report)

    gc = sub.add_parser(
        "gc",
        help="delete shards and bucket indexes that stopped being published longer ago than the retention "
        "(PRX_SHARD_RETENTION_DAYS, 7 days by default); every run does this too",
    )
    gc.add_argument("--retention-days", type=float, help="this retention instead of PRX_SHARD_RETENTION_DAYS")
    gc.add_argument("--root", help="data root (default: $PRX_DATA_ROOT or ./data)")
    gc.set_defaults(func=cmd_gc)

    # Listed for --help; main() hands their arguments on untouched.
    sub.add_parser("explore", help="the corpus explorer web app (127.0.0.1 by default)")
    # Listed for --help; main() hands its arguments to prx_data.imaging.jpeg_study.
    sub.add_parser("jpeg-study", help="PSNR after 1 and 10 JPEG q92 cycles and size vs PNG, per resolution band")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # Dagster warns on every load that APIs this project relies on are in preview or beta (asset
    # checks on partitions, observable source assets, owners): a dozen lines over every command's
    # output that say nothing about the user's data. Checked when Dagster is upgraded, not here.
    warnings.filterwarnings("ignore", message=r".*is currently in (preview|beta)")
    # Commands with their own argument parsers get the rest of the line untouched.
    if argv[:1] == ["jpeg-study"]:
        # lazy: pulls in PIL, numpy, pydantic
        from prx_data.imaging.jpeg_study import main as study_main

        return study_main(argv[1:])
    if argv[:1] == ["explore"]:
        # lazy: pulls in lance, starlette, jinja2
        from prx_data.explorer.app import main as explore_main

        return explore_main(argv[1:])
    args = build_parser().parse_args(argv)
    cap_malloc_arenas()
    try:
        return args.func(args)
    except ValueError as exc:
        # A mistyped variable or root is the user's to fix, named in the message: no traceback.
        # Looked up, not imported: a command that never read the settings cannot have raised it.
        settings = sys.modules.get("prx_data.core.settings")
        if not isinstance(exc, MissingDataRoot) and (settings is None or not isinstance(exc, settings.InvalidSettings)):
            raise
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        # What no retry fixes (a full disk, a refused token, a missing bucket): the cause and
        # what fixes it in one line, no traceback.
        from prx_data.core.permanent_errors import permanent_cause

        cause = permanent_cause(exc)
        if cause is None:
            raise
        print(f"error: {cause.line()}", file=sys.stderr)
        return 1


def entry() -> None:
    """The ``prx-data`` command: ``main``, then an exit without module teardown (``fast_exit``).
    An exception or ``SystemExit`` (a usage error) leaves the usual way, and so does every exit
    under a profiler or debugger (``python -m cProfile`` writes its figures after the program
    returns)."""
    from prx_data.app.fast_exit import exit_now

    code = main()
    if sys.getprofile() is not None or sys.gettrace() is not None:
        sys.exit(code)
    exit_now(code)


if __name__ == "__main__":
    entry()
