"""Runs and the loader ride through S3 throttling: a proxy on 127.0.0.1 in front of moto answers
15 % of requests with ``503 SlowDown`` (``throttle_proxy``), and ``prx-data run`` (twice: a first
run and a no-change one), the storage layer and ``make_loader`` all complete through it, with
nothing lost. Every client takes its retries from ``core.s3_retry``."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest
from PIL import Image

from prx_data.app.cli import main
from prx_data.core.settings import get_settings
from prx_data.core.storage import file_size, is_file, list_dir, locate, read_bytes, write_bytes
from prx_data.training.loader import make_loader
from prx_data_tests.app.helpers import tiny_root
from prx_data_tests.export.trainable import PUBLISHED, build_corpus, loader_epoch, release
from prx_data_tests.throttle_proxy import ThrottleProxy

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")
SHARE = 0.15


@pytest.fixture
def throttled(s3_server):
    with ThrottleProxy(s3_server.endpoint, SHARE, seed=7) as proxy:
        yield proxy, {**s3_server.options(), "aws_endpoint": proxy.endpoint}


def test_storage_calls_ride_through_slow_downs(throttled, s3_bucket):
    proxy, options = throttled
    for i in range(40):
        loc = locate(f"s3://{s3_bucket}/t/{i}.bin", options)
        write_bytes(loc, bytes([i]) * 100)
        assert is_file(loc) and file_size(loc) == 100 and read_bytes(loc) == bytes([i]) * 100
    assert len(list_dir(locate(f"s3://{s3_bucket}/t", options))) == 40
    assert proxy.counts.throttled >= 20 and {"HEAD", "GET", "PUT"} <= set(proxy.counts.by_method), proxy.counts


def test_the_loader_rides_through_slow_downs(throttled, s3_server, s3_bucket, tmp_path: Path):
    proxy, options = throttled
    root = f"s3://{s3_bucket}/mds"
    corpus = build_corpus(root, s3_server.options())  # written without throttling
    release()
    proxy.counts.throttled = 0
    loader = make_loader(root, batch_size=1, shuffle=False, cache_dir=str(tmp_path / "cache"), storage_options=options)
    ids = [s for batch in loader_epoch(loader) for s in batch]
    kept = set().union(*(corpus.kept_by_bucket()[rel] for rel in PUBLISHED))
    assert len(ids) == len(set(ids)) and set(ids) == kept
    assert proxy.counts.throttled > 0, proxy.counts


def _run(root: Path) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = main(["run", "--root", str(root)])
    get_settings.cache_clear()
    return code, out.getvalue()


def test_prx_data_run_rides_through_slow_downs(throttled, s3_server, s3_bucket, tmp_path: Path, clean_prx_env):
    proxy, options = throttled
    monkeypatch = clean_prx_env
    root = tiny_root(tmp_path / "data", images=4)
    for i, image in enumerate(sorted((root / "photos").glob("*.jpg"))):  # large enough for the smallest tier
        Image.new("RGB", (640, 640), (40 * i, 90, 160)).save(image, quality=90)
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("PRX_S3_ENDPOINT", proxy.endpoint)
    monkeypatch.setenv("PRX_LANCE_ROOT", f"s3://{s3_bucket}/lance")
    monkeypatch.setenv("PRX_MDS_ROOT", f"s3://{s3_bucket}/mds")
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "dagster_home"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("PRX_RAY_ADDRESS", raising=False)
    code, first = _run(root)
    assert code == 0, first[-4000:]
    assert proxy.counts.throttled > 0
    code, out = _run(root)  # the no-change run: plans from the object store's state
    assert code == 0, out[-4000:]
    release()
    loader = make_loader(f"s3://{s3_bucket}/mds", batch_size=1, shuffle=False, cache_dir=str(tmp_path / "cache"), storage_options=options)
    assert len([s for batch in loader_epoch(loader) for s in batch]) == 4, first[-4000:]
