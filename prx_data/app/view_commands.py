"""``prx-data views``: list, build and compare ablation views (docs/views.md). Heavy imports
happen inside each command."""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Callable
from typing import Any


def freshness(settings, name: str) -> str:
    """'fresh', or 'stale: <why>' / 'not built' for view ``name`` over the current tree."""
    from prx_data.training.loader import published_buckets
    from prx_data.training.views import ViewNotReadyError, view_counts

    try:
        view_counts(
            settings.mds_root,
            name,
            published_buckets(settings.mds_root, settings.storage_options),
            settings.storage_options,
            settings.views_dir,
        )
    except ViewNotReadyError as exc:
        return "stale: " + str(exc)
    return "fresh"


def cmd_views_list(args: argparse.Namespace, settings: Any, priorities: Callable[[], dict[str, int]]) -> int:
    from prx_data.curation.views import load_views, read_record

    found = load_views(settings.views_dir)
    if not found.views and not found.errors:
        print(f"no view files in {settings.views_dir} (the default cut is the only one)")
    for name, view in sorted(found.views.items()):
        record = read_record(settings.mds_root, name, settings.storage_options)
        if record is None:
            print(f"{name}: not built (prx-data views build {name})  [{view.path}]")
            continue
        rules = ", ".join(f"{rule} {count}" for rule, count in record["per_rule"].items()) or "none"
        state = freshness(settings, name)
        print(
            f"{name}: {record['trainable']} trainable sample(s), {record['skipped']} skipped; per rule: {rules}; "
            f"built {record['built_at']} in {record['seconds']}s; {state}"
        )
        for warning in record.get("warnings", []):
            print(f"  warning: {warning}")
    for why in found.errors.values():
        print(f"bad view file: {why}", file=sys.stderr)
    return 1 if found.errors else 0


def cmd_views_build(args: argparse.Namespace, settings: Any, priorities: Callable[[], dict[str, int]]) -> int:
    from prx_data.core.paths import StoragePaths
    from prx_data.core.settings import EXCLUDE_LABELS
    from prx_data.curation.view_build import build_views
    from prx_data.imaging.buckets import BucketConfig

    built = build_views(
        StoragePaths.from_settings(settings),
        settings.views_dir,
        priorities(),
        only=[args.name] if args.name else None,
        bucket_cfg=BucketConfig(),
        exclude_labels=tuple(args.exclude_label) if args.exclude_label is not None else EXCLUDE_LABELS,
        dedup_radius=settings.dedup_radius,
        options=settings.storage_options,
    )
    for name, view in sorted(built.built.items()):
        rules = ", ".join(f"{rule} {count}" for rule, count in view.per_rule.items()) or "none"
        print(
            f"view {name}: {view.trainable} trainable sample(s), {view.skipped} skipped (per rule: {rules}); "
            f"{view.report.written} sidecar(s) written, {view.report.unchanged} unchanged, {view.report.removed} removed "
            f"in {view.seconds:.2f}s"
        )
        for warning in view.warnings:
            print(f"  warning: {warning}", file=sys.stderr)
    if built.built:
        from prx_data.curation.report import build_data_card

        for name in sorted(built.built):
            card = build_data_card(StoragePaths.from_settings(settings), sorted(priorities()), options=settings.storage_options, view=name)
            print(f"view {name}: data card {card.write(settings.mds_root, settings.storage_options)}")
    for name in built.retired:
        print(f"view {name}: retired (its file left the views folder)")
    for why in built.errors.values():
        print(f"view not built: {why}", file=sys.stderr)
    return 1 if built.errors else 0


def _skipped(settings, name: str) -> dict[tuple[str, int], tuple[str, str, set[str]]]:
    """(shard, index) -> (sample id, source, reasons) of each placement ``name`` skips."""
    from prx_data.curation.views import DEFAULT_VIEW
    from prx_data.export.skiplist import DEFAULT_NAMES, iter_root_sidecars, view_names

    names = DEFAULT_NAMES if name == DEFAULT_VIEW else view_names(name)
    out: dict[tuple[str, int], tuple[str, str, set[str]]] = {}
    for sidecar in iter_root_sidecars(settings.mds_root, settings.storage_options, names=names):
        folder = sidecar.path.rsplit("/", 1)[0]
        shard = f"{folder}/{sidecar.shard}"
        source = folder.split("/")[2]
        for index, sid in zip(sidecar.indices.tolist(), sidecar.sample_ids):
            out.setdefault((shard, index), (sid, source, set()))[2].add(sidecar.reason)
    return out


def cmd_views_diff(args: argparse.Namespace, settings: Any, priorities: Callable[[], dict[str, int]]) -> int:
    from prx_data.curation.views import DEFAULT_VIEW, read_record

    for name in (args.a, args.b):
        if name != DEFAULT_VIEW and read_record(settings.mds_root, name, settings.storage_options) is None:
            print(f"error: view {name!r} has not been built (prx-data views build {name})", file=sys.stderr)
            return 2
    a, b = _skipped(settings, args.a), _skipped(settings, args.b)
    for here, there, label in ((b, a, f"in {args.a}, not in {args.b}"), (a, b, f"in {args.b}, not in {args.a}")):
        only = {key: value for key, value in here.items() if key not in there}
        samples = {sid for sid, _, _ in only.values()}
        print(f"{label}: {len(samples)} sample(s) ({len(only)} placement(s))")
        by_rule = Counter(reason for _, _, reasons in only.values() for reason in reasons)
        by_source = Counter(source for _, source, _ in only.values())
        for rule, count in sorted(by_rule.items()):
            print(f"  skipped by the other for {rule}: {count}")
        for source, count in sorted(by_source.items()):
            print(f"  from source {source}: {count}")
    return 0


def add_parsers(sub, run: Callable) -> None:
    """``run(command)`` wraps a command into the entry point that reads the settings."""
    views = sub.add_parser("views", help="ablation views: list them (trainable samples, per-rule exclusions, fresh or stale)")
    views.add_argument("--root")
    views.set_defaults(func=run(cmd_views_list))
    views_sub = views.add_subparsers(dest="views_command")
    build = views_sub.add_parser("build", help="build every view (or NAME) now, without a full run")
    build.add_argument("name", nargs="?")
    build.add_argument("--exclude-label", action="append", help="the default cut's excluded labels (default: nsfw, text)")
    build.add_argument("--root")
    build.set_defaults(func=run(cmd_views_build))
    diff = views_sub.add_parser("diff", help="samples trainable in one view and not the other, by rule and by source")
    diff.add_argument("a", help="a view name ('default': the default cut)")
    diff.add_argument("b")
    diff.add_argument("--root")
    diff.set_defaults(func=run(cmd_views_diff))


__all__ = ["add_parsers", "cmd_views_build", "cmd_views_diff", "cmd_views_list"]
