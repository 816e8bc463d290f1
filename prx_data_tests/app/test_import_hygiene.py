"""Plain commands and the code location load none of the heavy ML packages: each is imported or
run in a fresh interpreter, and the modules it left in ``sys.modules`` are checked."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from prx_data_tests.app.helpers import cli_env, tiny_root

HEAVY = ("torch", "transformers", "streaming", "vllm", "sentence_transformers", "torchvision")
# The code location also leaves lance (and the pandas it pulls in) to the asset bodies: ~0.45 s
# of the ~2 s Dagster paid in every run process, daemon tick and UI reload; and httpx (with the
# rich and pygments it imports) to the clients that send requests.
CODE_LOCATION_HEAVY = (*HEAVY, "lance", "pandas", "httpx", "rich", "pygments")

PROBE = f"""
import json, sys
HEAVY = {CODE_LOCATION_HEAVY!r}
argv = json.loads(sys.argv[1])
if argv == ["<definitions>"]:
    import prx_data.definitions
else:
    from prx_data.app.cli import main
    try:
        main(argv)
    except SystemExit:
        pass
print("LOADED=" + json.dumps(sorted(m for m in HEAVY if m in sys.modules)))
"""


def _loaded(argv: list[str], env: dict[str, str]) -> list[str]:
    out = subprocess.run([sys.executable, "-c", PROBE, json.dumps(argv)], env=env, capture_output=True, text=True, timeout=300, check=False)
    lines = [line for line in out.stdout.splitlines() if line.startswith("LOADED=")]
    assert lines, f"the probe did not finish: rc={out.returncode}\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
    return json.loads(lines[-1].removeprefix("LOADED="))


@pytest.mark.parametrize(
    "argv",
    [
        ["<definitions>"],
        ["sources", "--root", "{root}"],
        ["buckets"],
        ["lineage", "--root", "{root}", "--key", "photos:p0.jpg"],
        ["optout", "add", "--root", "{root}", "--id", "req-1", "--key", "photos:p0.jpg"],
        ["optout", "apply", "--root", "{root}"],
        ["optout", "report", "--root", "{root}", "--id", "req-1"],
    ],
    ids=lambda a: " ".join(a[:2]).replace("--root", "").strip(),
)
def test_plain_commands_and_code_location_load_no_heavy_package(argv, tmp_path):
    root = tiny_root(tmp_path / "data")
    env = cli_env(tmp_path)
    env["PRX_DATA_ROOT"] = str(root)
    env["DAGSTER_HOME"] = str(tmp_path / "dagster_home")
    (tmp_path / "dagster_home").mkdir()
    if argv[:2] == ["optout", "report"]:  # a request to report on
        _loaded(["optout", "add", "--root", str(root), "--id", "req-1", "--key", "photos:p0.jpg"], env)
    argv = [a.replace("{root}", str(root)) for a in argv]
    loaded = _loaded(argv, env)
    assert [m for m in loaded if argv == ["<definitions>"] or m in HEAVY] == []


EXPORT_PROBE = f"""
import io, json, sys, tempfile
from PIL import Image
import prx_data.stages.export_stage  # what an export Ray task unpickles its function from
from prx_data.export.mds_writer import MdsWriterConfig, write_partition
from prx_data.export.reuse import ShardReader, source_indexes

buf = io.BytesIO()
Image.new("RGB", (8, 8)).save(buf, format="JPEG")
samples = [dict(tier=512, height=512, width=512, image=buf.getvalue(), caption=f"c{{i}}", sample_id=f"s{{i}}",
                original_width=8, original_height=8) for i in range(5)]
root = tempfile.mkdtemp()
result = write_partition(samples, mds_root=root, source="alpha", config=MdsWriterConfig(hashes=("xxh64",)))
placements = [(r["shard"], r["index_in_shard"]) for r in result.lineage.to_pylist()]
read = ShardReader(root, source_indexes(root, "alpha"), "alpha", tempfile.mkdtemp()).read(placements)
assert sorted(sample["sample_id"] for _, _, sample in read) == [f"s{{i}}" for i in range(5)]
print("LOADED=" + json.dumps(sorted(m for m in {HEAVY!r} if m in sys.modules)))
"""


def test_export_write_and_reread_load_no_heavy_package(tmp_path):
    """An export worker's whole path (the stage module, writing shards, reading old ones back)
    runs without streaming's start-up (torch, transformers: seconds per fresh Ray worker)."""
    env = cli_env(tmp_path)
    out = subprocess.run([sys.executable, "-c", EXPORT_PROBE], env=env, capture_output=True, text=True, timeout=300, check=False)
    lines = [line for line in out.stdout.splitlines() if line.startswith("LOADED=")]
    assert lines, f"the probe did not finish: rc={out.returncode}\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}"
    assert json.loads(lines[-1].removeprefix("LOADED=")) == []
