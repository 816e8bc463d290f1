"""``prx-data``: the command line. Heavy imports happen inside each command."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from collections import Counter
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def _use_data_root(root: Path) -> None:
    """Point settings and Dagster at ``root`` (before anything reads them)."""
    from prx_data.settings import get_settings

    os.environ["PRX_DATA_ROOT"] = str(root)
    home = Path(os.environ.get("DAGSTER_HOME") or root / ".dagster")
    home.mkdir(parents=True, exist_ok=True)
    if not (home / "dagster.yaml").exists() and (REPO_ROOT / "dagster.yaml").exists():
        shutil.copy(REPO_ROOT / "dagster.yaml", home / "dagster.yaml")
    os.environ["DAGSTER_HOME"] = str(home)
    get_settings.cache_clear()


def _summary(sources: list[str]) -> str:
    import lance

    from prx_data.lance_io import open_table
    from prx_data.paths import StoragePaths
    from prx_data.settings import get_settings

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
    import json

    from prx_data.lance_io import open_table

    lines = ["", "Export (MDS)"]
    for source in sources:
        ds = open_table(paths.exports_table(source), settings.storage_options)
        if ds is None:
            continue
        t = ds.to_table(columns=["shard", "drop_reason"])
        exported = t.num_rows - t.column("shard").null_count
        drops = Counter(r.split(":", 1)[0] for r in t.column("drop_reason").to_pylist() if r)
        lines.append(f"{source:>10}: exported={exported} dropped={dict(sorted(drops.items()))}")
    skipped: Counter = Counter()
    root = Path(settings.mds_root)
    if root.exists():
        for sidecar in root.rglob("*.skip.*.json"):
            obj = json.loads(sidecar.read_text())
            skipped[obj["reason"].split(":")[0] if obj["reason"].startswith("optout") else obj["reason"]] += len(obj["indices"])
        buckets = sorted({p.parent.relative_to(root).as_posix() for p in root.glob("*/*/index.json")})
        lines.append(f"{'':>10}  {len(buckets)} bucket streams; skipped by reason: {dict(sorted(skipped.items()))}")
    return lines


def _ui_hint() -> str:
    return (
        "\nOpen the Dagster UI on this data:\n"
        f"  cd {REPO_ROOT} && DAGSTER_HOME={os.environ['DAGSTER_HOME']} PRX_DATA_ROOT={os.environ['PRX_DATA_ROOT']} \\\n"
        "    .venv/bin/dagster dev -w workspace.yaml   # then browse http://127.0.0.1:3000\n"
    )


def cmd_demo(args: argparse.Namespace) -> int:
    root = Path(args.root).resolve()
    if args.fresh and root.exists():
        shutil.rmtree(root)
    _use_data_root(root)
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
    import dagster as dg

    from prx_data.definitions import build_defs
    from prx_data.orchestrate import materialize_corpus, materialize_sources
    from prx_data.registry import load_registry
    from prx_data.settings import get_settings

    settings = get_settings()
    registry = load_registry(settings.sources_dir)
    for error in registry.errors:
        print(f"bad source spec (skipped): {error}")
    sources = [s for s in registry.sources if not args.source or s in args.source]
    defs = build_defs()
    with dg.DagsterInstance.get() as instance:
        outcome = materialize_sources(defs, instance, sources)
        corpus_ok = materialize_corpus(defs, instance)
    print(_summary(sources))
    print(_ui_hint())
    failed = [s for s, ok in outcome.items() if not ok]
    if failed or not corpus_ok:
        print(f"FAILED: {', '.join(failed) or 'corpus assets'}")
        return 1
    return 0


def cmd_sources(args: argparse.Namespace) -> int:
    from prx_data.registry import load_registry
    from prx_data.settings import get_settings

    if args.root:
        _use_data_root(Path(args.root).resolve())
    registry = load_registry(get_settings().sources_dir)
    for name, source in registry.sources.items():
        print(f"{name:>12}  {source.spec.shape:<12} priority={source.spec.priority:<4} {source.resolve_location()}")
    for error in registry.errors:
        print(f"ERROR {error}")
    return 1 if registry.errors else 0


def cmd_buckets(args: argparse.Namespace) -> int:
    from prx_data.imaging.buckets import BucketConfig, shape_table

    cfg = BucketConfig(tiers=tuple(args.tiers)) if args.tiers else BucketConfig()
    print(shape_table(cfg))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="prx-data", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="build the demo corpus and run the whole pipeline on it")
    demo.add_argument("--root", default=str(REPO_ROOT / "data" / "demo"))
    demo.add_argument("--fresh", action="store_true", help="delete the demo data first")
    demo.add_argument("--source", action="append", help="only these sources")
    demo.set_defaults(func=cmd_demo)

    run = sub.add_parser("run", help="run the whole pipeline on the configured registry")
    run.add_argument("--root", help="data root (default: $PRX_DATA_ROOT or ./data)")
    run.add_argument("--source", action="append", help="only these sources")
    run.set_defaults(func=cmd_run)

    sources = sub.add_parser("sources", help="list registered sources and bad specs")
    sources.add_argument("--root")
    sources.set_defaults(func=cmd_sources)
    buckets = sub.add_parser("buckets", help="print the bucket shapes per resolution tier")
    buckets.add_argument("--tiers", type=int, nargs="+", help="tiers (default 512 1024 2048 4096)")
    buckets.set_defaults(func=cmd_buckets)

    # Listed for --help; main() hands its arguments to prx_data.imaging.jpeg_study.
    sub.add_parser("jpeg-study", help="PSNR after 1 and 10 JPEG q92 cycles and size vs PNG, per resolution band")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # Commands with their own argument parsers get the rest of the line untouched.
    if argv[:1] == ["jpeg-study"]:
        from prx_data.imaging.jpeg_study import main as study_main

        return study_main(argv[1:])
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
