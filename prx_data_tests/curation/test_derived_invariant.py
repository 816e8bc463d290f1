"""Derived values follow their inputs, as one stateful property.

Random sequences of: edit a record's caption (new text, or none: a sidecar removed or added),
replace an item's image bytes under the same key, edit its licence, add or remove an item, file
an opt-out request for a key, switch the captioner version, and run the pipeline (ingest, phash,
caption, export, index merge, opt-out apply). After every run, through the training loader:
each sample that should be trained on is yielded exactly once, with the caption the current
captioner makes from its current source caption; nothing else is yielded.

The expected values come from the test's own model of the corpus (which caption, image and
licence each key holds), never from the tables under test. Images are unique per key, so dedup
keeps every sample.

CI size: PRX_DERIVED_PROPERTY_EXAMPLES (default 2) examples of PRX_DERIVED_PROPERTY_STEPS
(default 5) steps. A longer local run:

    PRX_DERIVED_PROPERTY_EXAMPLES=30 PRX_DERIVED_PROPERTY_STEPS=20 \\
        .venv/bin/python -m pytest -q prx_data_tests/curation/test_derived_invariant.py
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections import Counter
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from prx_data.core.ids import sample_id
from prx_data_tests.curation.optout_world import Item, World

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

EXAMPLES = int(os.environ.get("PRX_DERIVED_PROPERTY_EXAMPLES", "2"))
STEPS = int(os.environ.get("PRX_DERIVED_PROPERTY_STEPS", "5"))
SOURCE = "s1"
CAPTIONS = ("a red square", "a dog on a beach", "two cups of tea", "a city at night", "")
LICENSES = ("cc-by", "cc0", "proprietary")
# Most edits are followed by a run (each edit gets checked); some pile up before one.
THEN_RUN = st.sampled_from((True, True, False))


class DerivedMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="prx-derived-"))
        root = self.tmp / "data"
        self.world = World(root=root, lance_root=str(root / "lance"), mds_root=str(root / "mds"))
        self.opted_out: set[str] = set()
        self.images = 0  # every image is new: no two keys ever hold copies
        self.keys = 0
        self.synced = False

    def teardown(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _image(self) -> tuple[int, str]:
        self.images += 1
        return (100 + self.images, "exact")

    def _items(self) -> dict[str, Item]:
        return self.world.sources[SOURCE]

    def _key(self, pick: int) -> str:
        keys = sorted(self._items())
        return keys[pick % len(keys)]

    def _edited(self, then_run: bool) -> None:
        self.synced = False
        if then_run:
            self.run()

    # Rules -----------------------------------------------------------------------------------
    @initialize(n=st.integers(2, 4), caption=st.sampled_from(CAPTIONS))
    def a_source_run_then_a_caption_edited(self, n, caption):
        """Every example starts with the edit users make most: a caption, after a first run."""
        self.world.sources[SOURCE] = {}
        for _ in range(n):
            self.add_item()
        self.run()
        self.world.captions[(SOURCE, self._key(0))] = caption
        self.run()

    @rule(pick=st.integers(0, 100), caption=st.sampled_from((*CAPTIONS, None)), then_run=THEN_RUN)
    def edit_caption(self, pick, caption, then_run):
        self.world.captions[(SOURCE, self._key(pick))] = caption
        self._edited(then_run)

    @rule(pick=st.integers(0, 100), then_run=THEN_RUN)
    def replace_image(self, pick, then_run):
        self._items()[self._key(pick)].variant = self._image()
        self._edited(then_run)

    @rule(pick=st.integers(0, 100), licence=st.sampled_from(LICENSES), then_run=THEN_RUN)
    def edit_licence(self, pick, licence, then_run):
        self.world.licenses[(SOURCE, self._key(pick))] = licence
        self._edited(then_run)

    @rule()
    def add_item(self):
        self.keys += 1
        key = f"k{self.keys}"
        self._items()[key] = Item(self._image(), f"https://a.example.org/{key}.jpg")
        self.synced = False

    @precondition(lambda self: len(self.world.sources.get(SOURCE, {})) > 1)
    @rule(pick=st.integers(0, 100), then_run=THEN_RUN)
    def remove_item(self, pick, then_run):
        del self._items()[self._key(pick)]
        self._edited(then_run)

    @rule(pick=st.integers(0, 100), then_run=THEN_RUN)
    def opt_out(self, pick, then_run):
        key = self._key(pick)
        rid = f"req-{len(self.opted_out) + 1}-{key}"
        (self.world.root / "optout" / f"{rid}.yaml").write_text(yaml.safe_dump({"id": rid, "source_keys": [f"{SOURCE}:{key}"]}))
        self.opted_out.add(key)
        self._edited(then_run)

    @rule()
    def new_captioner(self):
        self.world.captioner += 1
        self.synced = False

    @rule()
    def run(self):
        self.world.chain(SOURCE)  # write the source, ingest (+ phash), caption, export
        self.world.merge()
        self.world.apply()
        self.synced = True

    # The invariant -----------------------------------------------------------------------------
    def _expected(self) -> dict[str, str]:
        out = {}
        for key in self._items():
            if key in self.opted_out:
                continue
            source_caption = self.world.caption_of(SOURCE, key)
            out[sample_id(SOURCE, key)] = f"{source_caption or 'an image'} (captioner {self.world.captioner})"
        return out

    @invariant()
    def the_loader_yields_the_current_inputs_derived_values_once(self):
        if not self.synced:
            return
        yielded = self.world.yielded_samples()
        counts = Counter(s["sample_id"] for s in yielded)
        assert all(n == 1 for n in counts.values()), f"yielded more than once: {[s for s, n in counts.items() if n > 1]}"
        expected = self._expected()
        got = {s["sample_id"]: s["caption"] for s in yielded}
        assert set(got) == set(expected), f"missing {sorted(set(expected) - set(got))}, extra {sorted(set(got) - set(expected))}"
        stale = {sid: (got[sid], want) for sid, want in expected.items() if got[sid] != want}
        assert not stale, f"stale captions (yielded, current): {stale}"


DerivedMachine.TestCase.settings = settings(
    max_examples=EXAMPLES,
    stateful_step_count=STEPS,
    deadline=None,
    derandomize=bool(os.environ.get("PRX_DERIVED_PROPERTY_DERANDOMIZE")),
    database=None,
    suppress_health_check=list(HealthCheck),
    # Each run step is the real pipeline (seconds): shrinking only on request.
    phases=[Phase.explicit, Phase.reuse, Phase.generate] + ([Phase.shrink] if os.environ.get("PRX_DERIVED_PROPERTY_SHRINK") else []),
)
TestDerivedInvariant = DerivedMachine.TestCase
