"""A trainer in its own process: ``make_loader`` over an MDS root, one epoch, paused half-way.

Run as ``python -m prx_data_tests.training.trainer_child CONFIG.json``. It reads half the epoch,
writes the ids read so far to ``<half>``, waits for ``<go>`` to exist (the test curates the tree
meanwhile), reads the rest and prints the ids of the whole epoch as JSON. Any error goes to
stderr and exits 3: the test asserts that the process exits at all, and how.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback


def main(config_path: str) -> int:
    with open(config_path) as handle:
        config = json.load(handle)
    from prx_data.training.loader import make_loader

    loader = make_loader(
        config["root"],
        batch_size=1,
        shuffle=False,
        num_workers=config.get("num_workers", 0),
        cache_dir=config.get("cache_dir"),
        storage_options=config.get("options"),
        predownload=1,
    )
    total = len(loader.dataset)
    ids: list[str] = []
    try:
        for batch in loader:
            ids.extend(batch["sample_id"])
            if len(ids) == total // 2:
                with open(config["half"] + ".part", "w") as handle:
                    json.dump(ids, handle)
                os.replace(config["half"] + ".part", config["half"])
                deadline = time.monotonic() + 300
                while not os.path.exists(config["go"]):
                    if time.monotonic() > deadline:
                        raise TimeoutError("the test never said go")
                    time.sleep(0.05)
    except Exception:  # noqa: BLE001 - the test reads the error from stderr
        traceback.print_exc()
        return 3
    print(json.dumps({"total": total, "ids": ids}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
