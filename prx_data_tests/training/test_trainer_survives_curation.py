"""A trainer that opened the tree before curation keeps reading through it; a shard that is
really gone fails the trainer with the file and the reason named, and its process exits.

The trainer is its own process (``trainer_child``: ``make_loader``, one epoch, paused half-way).
Meanwhile the pipeline's own steps run twice, as two ``prx-data run``s do after an opt-out:
re-ingest (the opt-out drops two of ten rows: past the rewrite share, so the bucket is
rewritten), export, the ``corpus_index`` merge, then skip lists and the second merge
(``curation.refresh``, what ``skip_lists`` and ``prx-data optout apply`` run). With the default
retention the replaced shards survive both runs and the trainer finishes its epoch; with the
retention set to zero (``PRX_SHARD_RETENTION_DAYS=0``: the retention has passed) they are
collected and a trainer still holding their index fails with ``ShardUnavailableError``.
Local and s3:// roots.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from prx_data.core.settings import get_settings
from prx_data.core.storage import glob_files, locate, try_read_bytes
from prx_data.export.corpus_index import merge_all
from prx_data.export.mds_rows import MdsWriterConfig
from prx_data.export.tree import SUPERSEDED_BASENAME, list_buckets
from prx_data_tests.conftest import pin_fixture_publication
from prx_data_tests.curation.optout_world import Item, World

REPO = Path(__file__).resolve().parents[2]
ONE_SAMPLE_SHARDS = MdsWriterConfig(size_limit=1000)  # every sample its own shard

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


class SmallShardWorld(World):
    def export(self, name: str, run_id: str | None = None) -> None:
        from prx_data.stages.export_stage import export_source

        export_source(
            self.paths.raw_table(name),
            name,
            mds_root=self.mds_root,
            exports_uri=self.paths.exports_table(name),
            writer_cfg=ONE_SAMPLE_SHARDS,
            executor="local",
            storage_options=self.options,
            run_id=run_id,
        )


class Trainer:
    started: list[subprocess.Popen] = []

    def __init__(self, world: World, folder: Path):
        folder.mkdir(parents=True)
        self.half, self.go = folder / "half.json", folder / "go"
        config = folder / "config.json"
        config.write_text(
            json.dumps(
                {
                    "root": world.mds_root,
                    "options": world.options,
                    "cache_dir": str(folder / "cache"),
                    "half": str(self.half),
                    "go": str(self.go),
                }
            )
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PRX_", "AWS_", "S3_ENDPOINT"))}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "prx_data_tests.training.trainer_child", str(config)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        Trainer.started.append(self.proc)

    def wait_half(self) -> list[str]:
        deadline = time.monotonic() + 180
        while not self.half.exists():
            if self.proc.poll() is not None:
                raise AssertionError(f"trainer exited early: {self.proc.communicate()}")
            assert time.monotonic() < deadline, "the trainer never reached half its epoch"
            time.sleep(0.1)
        return json.loads(self.half.read_text())

    def finish(self) -> tuple[int, str, str]:
        self.go.touch()
        try:
            out, err = self.proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
            raise AssertionError(f"the trainer process did not exit: {err[-3000:]}") from None
        return self.proc.returncode, out, err


@pytest.fixture(autouse=True)
def _no_trainer_left():
    yield
    while Trainer.started:  # a failed assertion must not leave a trainer waiting for "go"
        proc = Trainer.started.pop()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def _run(world: World) -> None:
    """What one ``prx-data run`` does for the source and the corpus after an opt-out, with the
    retention the assets pass (the ``PRX_SHARD_RETENTION_DAYS`` setting)."""
    from prx_data.curation.refresh import refresh

    retention_s = get_settings().shard_retention_s
    world.ingest("s1")
    world.export("s1")
    merge_all(world.mds_root, world.options, min_stream_samples=1, gc_min_age_s=retention_s)  # corpus_index
    # skip_lists (and `prx-data optout apply`): skip lists, then the second merge
    refresh(
        world.paths,
        world.optout_dir,
        world.priorities(),
        exclude_labels=(),
        options=world.options,
        write_card=False,
        retention_s=retention_s,
    )


def _shards(world: World) -> set[str]:
    root = locate(world.mds_root, world.options)
    return {name for name in glob_files(root, "*.mds", recursive=True)}


def _opt_out(world: World, request: str, keys: list[str]) -> None:
    (world.root / "optout" / f"{request}.yaml").write_text(yaml.safe_dump({"id": request, "source_keys": [f"s1:{k}" for k in keys]}))


def test_a_trainer_survives_curation_and_a_gone_shard_is_named(storage_root, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    for name in list(os.environ):
        if name.startswith("PRX_") and name != "PRX_RAY_ADDRESS":
            monkeypatch.delenv(name)
    pin_fixture_publication(monkeypatch)
    monkeypatch.setenv("PRX_DATA_ROOT", str(tmp_path / "data"))
    get_settings.cache_clear()
    world = SmallShardWorld.on_root(storage_root, tmp_path / "data", monkeypatch)
    world.sources["s1"] = {f"k{i}": Item((i, "exact"), f"https://a.example.org/{i}.jpg") for i in range(10)}
    world.chain("s1")
    merge_all(world.mds_root, world.options, min_stream_samples=1, gc_min_age_s=get_settings().shard_retention_s)
    world.apply()
    first = _shards(world)
    assert len(first) >= 10
    if storage_root.kind == "local":  # an export 3 h old: its write time is no reason to keep it
        old = time.time() - 3 * 3600
        for rel in first:
            os.utime(os.path.join(world.mds_root, rel), (old, old))

    trainer = Trainer(world, tmp_path / "trainer-a")
    assert len(trainer.wait_half()) == 5
    _opt_out(world, "req-1", ["k3", "k8"])  # 2 of 10 rows: past the rewrite share
    _run(world)
    _run(world)
    now = _shards(world)
    assert len(now - first) >= 8, "the bucket was not rewritten"
    assert first <= now, "a replaced shard was deleted inside its retention"
    (ref,) = list_buckets(world.mds_root, world.options)
    recorded = json.loads(try_read_bytes(locate(world.mds_root, world.options).child(ref.rel, SUPERSEDED_BASENAME)) or b"{}")
    assert {name.split("/", 1)[1] for name in recorded["objects"] if name.startswith("s1/")} == {s.split("/", 3)[3] for s in first}
    code, out, err = trainer.finish()
    assert code == 0, err[-3000:]
    epoch = json.loads(out)
    assert epoch["total"] == 10 and len(set(epoch["ids"])) == 10  # the epoch it opened, whole

    # The retention has passed: the next curation collects what the first trainer read, and a
    # trainer holding the index of before fails on the first shard it lacks, named.
    trainer = Trainer(world, tmp_path / "trainer-b")
    assert len(trainer.wait_half()) == 4
    monkeypatch.setenv("PRX_SHARD_RETENTION_DAYS", "0")
    get_settings.cache_clear()
    _opt_out(world, "req-2", ["k5"])  # 1 of 8: past the rewrite share again
    _run(world)
    gone = now - _shards(world)
    assert gone == now, "the retention did not apply"
    code, out, err = trainer.finish()
    assert code == 3, (out, err[-3000:])
    assert "ShardUnavailableError" in err and "PRX_SHARD_RETENTION_DAYS" in err, err[-3000:]
    (message,) = [line for line in err.splitlines() if line.startswith("prx_data.training.loader.ShardUnavailableError")]
    assert "no longer exists" in message and ".mds" in message and world.mds_root.split("://")[-1] in message, message
