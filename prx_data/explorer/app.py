"""The explorer's HTTP routes, the app factory and the command line.

Routes (GET only; the app never writes):

    /                                 search (words + filters), grid of thumbnails
    /sample/{source}/{sample_id}      one sample traced to its shards and skip lists
    /similar/{source}/{sample_id}     nearest neighbours by the source's embedding
    /thumb/{source}/{sample_id}       256 px JPEG (/preview/...: 1024 px)
    /lookup?id=<sample_id>            finds the sample's source and redirects to its page
    /stats                            tiers, buckets and exclusions as charts, and the data card's
    /card                             the data card (``corpus_report``'s), its charts inline
    /report/data_card.md              the data card's Markdown; /report/charts/<name>.png its charts
    /style.css, /healthz

Blocking work (Lance, Pillow, the file system) runs in plain ``def`` endpoints, which Starlette
runs in its thread pool.
"""

from __future__ import annotations

import argparse
import os
import sys
from importlib import resources
from urllib.parse import urlencode

import jinja2
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.templating import Jinja2Templates

from prx_data.core.schema import LABELS
from prx_data.core.settings import Settings, get_settings, load_settings
from prx_data.core.storage import is_file, locate, resolve_root, try_read_bytes
from prx_data.curation.card_charts import CHARTS
from prx_data.explorer import validate
from prx_data.explorer.catalog import Catalog
from prx_data.explorer.charts import COLOURS, bar_chart
from prx_data.explorer.opted_out import OptedOut
from prx_data.explorer.samples import find_source, load_sample, neighbours
from prx_data.explorer.search import ExportIds, SearchParams, search
from prx_data.explorer.security import SecurityHeaders, TokenAuth, allowed_hosts_for, check_bind, is_loopback, new_token
from prx_data.explorer.skips import SkipIndex
from prx_data.explorer.stats import Figures, aspect_label, bucket_sort_key
from prx_data.explorer.thumbs import SIZES, ThumbnailCache, placeholder_svg
from prx_data.export.tree import DATA_CARD_BASENAME, card_chart_path, card_chart_rel, data_card_path, list_buckets

PACKAGE = "prx_data.explorer"


class Explorer:
    """What the routes share: the catalog and the caches over it."""

    def __init__(self, settings: Settings, show_opted_out: bool = False):
        self.settings = settings
        self.show_opted_out = show_opted_out
        self.catalog = Catalog(settings)
        self.opted_out = OptedOut(self.catalog.paths, settings.storage_options or None)
        self.skips = SkipIndex(settings.mds_root, storage_options=settings.storage_options)
        self.export_ids = ExportIds()
        self.thumbnails = ThumbnailCache()
        self.figures = Figures()


def _templates() -> Jinja2Templates:
    templates = Jinja2Templates(directory=str(resources.files(PACKAGE) / "templates"))
    # A name the view did not pass is a bug to see, not a blank cell.
    templates.env.undefined = jinja2.StrictUndefined
    templates.env.filters["phash_hex"] = lambda v: "" if v is None else f"{int(v) & (2**64 - 1):016x}"
    return templates


TEMPLATES = _templates()


def _explorer(request: Request) -> Explorer:
    return request.app.state.explorer


def _page(request: Request, name: str, status_code: int = 200, **context) -> Response:
    return TEMPLATES.TemplateResponse(request, name, context, status_code=status_code)


# Search --------------------------------------------------------------------------------------
def _search_params(request: Request, explorer: Explorer) -> SearchParams:
    qp = request.query_params
    source = qp.get("source") or None
    return SearchParams(
        q=validate.query(qp.get("q")),
        source=explorer.catalog.source(source) if source else None,
        label=validate.label(qp.get("label")),
        status=validate.status(qp.get("status")),
        tier=validate.tier(qp.get("tier")),
        bucket=validate.bucket(qp.get("bucket")),
        skipped=validate.skipped(qp.get("skipped")),
        page=validate.page(qp.get("page")),
    )


def _query_string(params: SearchParams, page: int) -> str:
    values = {
        "q": params.q,
        "source": params.source or "",
        "label": params.label or "",
        "status": params.status or "",
        "tier": "" if params.tier is None else str(params.tier),
        "bucket": params.bucket or "",
        "skipped": {None: "", True: "yes", False: "no"}[params.skipped],
        "page": str(page),
    }
    return urlencode({k: v for k, v in values.items() if v})


def search_page(request: Request) -> Response:
    explorer = _explorer(request)
    params = _search_params(request, explorer)
    result = search(explorer.catalog, explorer.skips.snapshot(), explorer.export_ids, params)
    tiers = sorted({int(t) for t in _bucket_options(explorer, tiers_only=True)})
    return _page(
        request,
        "search.html",
        params=params,
        result=result,
        sources=sorted(explorer.catalog.sources()),
        labels=LABELS,
        statuses=validate.STATUSES,
        tiers=tiers,
        buckets=sorted({b.split("/", 1)[1] for b in _bucket_options(explorer)}),
        prev_link="?" + _query_string(params, params.page - 1) if params.page > 1 else None,
        next_link="?" + _query_string(params, params.page + 1) if result.has_more else None,
    )


def _bucket_options(explorer: Explorer, tiers_only: bool = False) -> list[str]:

    refs = list_buckets(explorer.settings.mds_root, explorer.settings.storage_options)
    return [str(r.tier) for r in refs] if tiers_only else [r.rel for r in refs]


# Samples -------------------------------------------------------------------------------------
def _source_and_id(request: Request) -> tuple[str, str]:
    explorer = _explorer(request)
    source = explorer.catalog.source(request.path_params["source"])
    return source, validate.sample_id(request.path_params["sample_id"])


def sample_page(request: Request) -> Response:
    explorer = _explorer(request)
    source, sample_id = _source_and_id(request)
    view = load_sample(explorer.catalog, explorer.skips.snapshot(), source, sample_id)
    return _page(request, "sample.html", view=view, row=view.row)


def similar_page(request: Request) -> Response:
    explorer = _explorer(request)
    source, sample_id = _source_and_id(request)
    found = neighbours(explorer.catalog, source, sample_id)
    snapshot = explorer.skips.snapshot()
    return _page(request, "similar.html", source=source, sample_id=sample_id, found=found, snapshot=snapshot)


def lookup(request: Request) -> Response:
    explorer = _explorer(request)
    sample_id = validate.sample_id(request.query_params.get("id", "").strip().lower())
    source = find_source(explorer.catalog, sample_id)
    if source is None:
        raise validate.NotFound(f"no source holds sample {sample_id}")
    return RedirectResponse(f"/sample/{source}/{sample_id}", status_code=303)


def _image(request: Request, kind: str) -> Response:
    explorer = _explorer(request)
    source, sample_id = _source_and_id(request)
    info = explorer.catalog.raw(source)
    if info is None:
        raise validate.NotFound(f"no table for source {source}")
    side = SIZES[kind]
    cache = {"cache-control": "private, max-age=300"}
    if not explorer.show_opted_out and sample_id in explorer.opted_out:
        # Its owner asked for it to be left out: no picture unless --show-opted-out (loopback).
        return Response(
            placeholder_svg(side, "opted out"),
            media_type="image/svg+xml",
            headers={"cache-control": "no-store", "x-prx-preview": "opted-out"},
        )
    jpeg = explorer.thumbnails.get(info.ds, sample_id, side)
    if jpeg is None:
        return Response(placeholder_svg(side), media_type="image/svg+xml", headers={**cache, "x-prx-preview": "unavailable"})
    return Response(jpeg, media_type="image/jpeg", headers=cache)


def thumb(request: Request) -> Response:
    return _image(request, "thumb")


def preview(request: Request) -> Response:
    return _image(request, "preview")


# Stats ---------------------------------------------------------------------------------------
def stats_page(request: Request) -> Response:
    explorer = _explorer(request)
    figures = explorer.figures.corpus(explorer.catalog, explorer.skips.snapshot())
    tiers = sorted(figures.total("tiers").items())
    buckets = sorted(figures.total("buckets").items(), key=lambda kv: bucket_sort_key(kv[0]))
    statuses = figures.total("statuses")
    not_ok = sorted(((s, n) for s, n in statuses.items() if s != "ok"), key=lambda kv: -kv[1])
    charts = {
        "tiers": bar_chart("Exported samples per resolution tier", [(f"{t} px", n) for t, n in tiers], COLOURS[0]),
        "buckets": bar_chart("Exported samples per aspect-ratio bucket", [(aspect_label(k), n) for k, n in buckets], COLOURS[1]),
        "ingest": bar_chart("Rows excluded at ingest, by status", not_ok, COLOURS[2]),
        "export": bar_chart("Rows dropped at export, by reason", figures.total("drops").most_common(), COLOURS[4]),
        "skips": bar_chart("Exported samples skipped, by reason", figures.skip_reasons.most_common(), COLOURS[3]),
    }
    return _page(
        request,
        "stats.html",
        figures=figures,
        charts=charts,
        card_charts=_card_charts(explorer),
        retired=sorted(explorer.catalog.retired()),
    )


# The data card ----------------------------------------------------------------------------------
def _report(explorer: Explorer, uri: str) -> bytes | None:
    return try_read_bytes(locate(uri, explorer.settings.storage_options or None))


def _card_charts(explorer: Explorer) -> list[tuple[str, str, str]]:
    """(name, title, link) of each chart the last data card drew: the same PNG files the card
    links, so the page and the card show the same numbers."""
    root = explorer.settings.mds_root
    found = []
    for name, title in CHARTS.items():
        if is_file(locate(card_chart_path(root, name), explorer.settings.storage_options or None)):
            found.append((name, title, f"/report/{card_chart_rel(name)}"))
    return found


def card_page(request: Request) -> Response:
    explorer = _explorer(request)
    text = _report(explorer, data_card_path(explorer.settings.mds_root))
    if text is None:
        raise validate.NotFound("no data card yet: the corpus_report asset writes it")
    return _page(request, "card.html", markdown=text.decode(errors="replace"), card_charts=_card_charts(explorer))


def report_file(request: Request) -> Response:
    """The card's Markdown or one of its charts; no other file of the tree is served."""
    explorer = _explorer(request)
    root = explorer.settings.mds_root
    name = request.path_params["name"]
    if name == DATA_CARD_BASENAME:
        uri, media = data_card_path(root), "text/markdown; charset=utf-8"
    elif name.startswith("charts/") and name.removeprefix("charts/").removesuffix(".png") in CHARTS and name.endswith(".png"):
        uri, media = card_chart_path(root, name.removeprefix("charts/").removesuffix(".png")), "image/png"
    else:
        raise validate.NotFound(f"no report {name}")
    data = _report(explorer, uri)
    if data is None:
        raise validate.NotFound(f"no {name} yet: the corpus_report asset writes it")
    return Response(data, media_type=media, headers={"cache-control": "no-cache"})


# Plumbing ------------------------------------------------------------------------------------
def style(request: Request) -> Response:
    css = (resources.files(PACKAGE) / "static" / "style.css").read_text()
    return Response(css, media_type="text/css", headers={"cache-control": "max-age=300"})


def healthz(request: Request) -> Response:
    return PlainTextResponse("ok")


def _error(request: Request, status_code: int, message: str) -> Response:
    return _page(request, "error.html", status_code=status_code, code=status_code, message=message)


async def _bad_request(request: Request, exc: Exception) -> Response:
    return _error(request, 400, str(exc))


async def _not_found(request: Request, exc: Exception) -> Response:
    return _error(request, 404, str(exc))


async def _http_error(request: Request, exc: Exception) -> Response:
    # Starlette types every handler as taking Exception; this one is registered for HTTPException.
    assert isinstance(exc, HTTPException)
    return _error(request, exc.status_code, exc.detail or "error")


ROUTES = [
    Route("/", search_page),
    Route("/sample/{source}/{sample_id}", sample_page),
    Route("/similar/{source}/{sample_id}", similar_page),
    Route("/thumb/{source}/{sample_id}", thumb),
    Route("/preview/{source}/{sample_id}", preview),
    Route("/lookup", lookup),
    Route("/stats", stats_page),
    Route("/card", card_page),
    Route("/report/{name:path}", report_file),
    Route("/style.css", style),
    Route("/healthz", healthz),
]


def build_app(
    settings: Settings | None = None,
    allowed_hosts: list[str] | None = None,
    token: str | None = None,
    show_opted_out: bool = False,
) -> Starlette:
    """The ASGI app over ``settings``' tables. ``allowed_hosts``: Host names it answers (None:
    any; :func:`serve` limits a loopback server to loopback names). ``token``: required on every
    request when set. ``show_opted_out``: previews of opted-out samples are served too."""
    middleware = [Middleware(SecurityHeaders)]
    if allowed_hosts:
        middleware.append(Middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts))
    if token:
        middleware.append(Middleware(TokenAuth, token=token))
    app = Starlette(
        routes=ROUTES,
        middleware=middleware,
        exception_handlers={
            validate.BadRequest: _bad_request,
            validate.NotFound: _not_found,
            HTTPException: _http_error,
        },
    )
    app.state.explorer = Explorer(settings or get_settings(), show_opted_out=show_opted_out)
    return app


def serve(
    host: str = "127.0.0.1",
    port: int = 8765,
    settings: Settings | None = None,
    allow_remote: bool = False,
    show_opted_out: bool = False,
) -> None:
    # lazy: uvicorn only when serving
    import uvicorn

    refused = check_bind(host, allow_remote, show_opted_out)
    if refused:
        raise ValueError(refused)
    token = None if is_loopback(host) else new_token()
    app = build_app(settings, allowed_hosts=allowed_hosts_for(host), token=token, show_opted_out=show_opted_out)
    if token:
        print(
            f"WARNING: the explorer listens on {host}, reachable from other machines; every request "
            "needs the token below (printed only now). Prefer an SSH tunnel to 127.0.0.1.",
            file=sys.stderr,
            flush=True,
        )
        print(f"prx-data explorer on http://{host}:{port}/?token={token} (read-only)", flush=True)
    else:
        print(f"prx-data explorer on http://{host}:{port}/ (read-only)", flush=True)
    # access_log off: with a token in a first request's query, the log would keep it.
    uvicorn.run(app, host=host, port=port, log_level="info", server_header=False, access_log=token is None)


def settings_for_root(root: str) -> Settings:
    """Settings with everything under ``root``: per-path overrides from the environment would
    point part of the explorer at another corpus."""
    env = {k: v for k, v in os.environ.items() if k not in ("PRX_LANCE_ROOT", "PRX_MDS_ROOT", "PRX_SOURCES_DIR", "PRX_OPTOUT_DIR")}
    env["PRX_DATA_ROOT"] = resolve_root(root)
    return load_settings(env)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="prx-data explore", description="Browse the corpus (read-only web app).")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--root", help="data root (default: PRX_DATA_ROOT or ./data)")
    parser.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow a --host other machines can reach; a token printed at start is then required",
    )
    parser.add_argument("--show-opted-out", action="store_true", help="serve previews of opted-out samples (loopback only)")
    args = parser.parse_args(argv)
    refused = check_bind(args.host, args.allow_remote, args.show_opted_out)
    if refused:
        print(f"error: {refused}", file=sys.stderr)
        return 2
    settings = settings_for_root(args.root) if args.root else get_settings()
    serve(args.host, args.port, settings, allow_remote=args.allow_remote, show_opted_out=args.show_opted_out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
