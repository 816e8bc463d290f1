"""A tiny data root and the environment to run ``prx-data`` on it as a subprocess."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from PIL import Image

REPO = Path(__file__).resolve().parents[2]


def tiny_root(root: Path, images: int = 2) -> Path:
    """One image-folder source of ``images`` small JPEGs with sidecar captions."""
    (root / "sources").mkdir(parents=True)
    (root / "optout").mkdir()
    photos = root / "photos"
    photos.mkdir()
    for i in range(images):
        Image.new("RGB", (320, 256), (40 * i % 255, 90, 160)).save(photos / f"p{i}.jpg", quality=90)
        (photos / f"p{i}.txt").write_text(f"a flat colour field number {i}")
    (root / "sources" / "photos.yaml").write_text("name: photos\nshape: image_folder\nlocation: ../photos\npriority: 1\nlicense: CC0-1.0\n")
    return root


def cli_env(tmp: Path) -> dict[str, str]:
    """The test's environment minus its shared Ray and data root: the command starts its own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PRX_", "RAY_AUTH", "DAGSTER_HOME"))}
    env.update(
        PYTHONPATH=os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p),
        XDG_STATE_HOME=str(tmp / "state"),
        PYTHONWARNINGS="ignore",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        RAY_USAGE_STATS_ENABLED="0",
        DAGSTER_DISABLE_TELEMETRY="1",
    )
    return env


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "prx_data.app.cli", *args]
