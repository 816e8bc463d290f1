"""The explorer in a real headless Chromium (Debian's /usr/bin/chromium, driven by Playwright).

Skipped only when the browser or Playwright is not installed; the same pages are covered
without a browser by the TestClient tests next to this file.
"""

from __future__ import annotations

import os
import shutil

import pytest

from prx_data_tests.explorer.corpus import CAPTION_MODEL, MODEL_CAPTION, RECAPTIONED
from prx_data_tests.explorer.helpers import exports, sidecar_reasons

CHROMIUM = os.environ.get("PRX_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync"]

playwright_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")
pytestmark = pytest.mark.skipif(
    not os.path.exists(CHROMIUM), reason=f"no Chromium at {CHROMIUM} (apt-get install -y chromium chromium-driver)"
)


@pytest.fixture(scope="module")
def page():
    with playwright_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        tab = context.new_page()
        tab.set_default_timeout(15_000)
        yield tab
        context.close()
        browser.close()


def _loaded_images(page) -> list[int]:
    """natural widths of the page's <img> elements (0 when one failed to load).

    Thumbnails are `loading="lazy"`, so the page's load event does not wait for them: wait
    until every image has finished, loaded or failed, before reading its width.
    """
    page.wait_for_function("() => Array.from(document.images).every(e => e.complete)")
    return page.eval_on_selector_all("img", "els => els.map(e => e.naturalWidth)")


def test_search_open_sample_see_caption_and_shard(page, live_server, corpus):
    source, key = RECAPTIONED
    sid = corpus.sid(source, key)
    page.goto(live_server + "/")
    page.fill("input[name=q]", "espresso")
    page.click("#search-button")
    page.wait_for_selector("#results .card")
    assert "full-text index (BM25) on caption" in page.inner_text("#search-method")
    cards = page.locator("#results .card")
    assert cards.count() == 1
    assert cards.first.get_attribute("data-sample-id") == sid
    assert all(width > 0 for width in _loaded_images(page))  # the thumbnail decoded

    cards.first.locator("a.open").click()
    page.wait_for_selector("#sample-id")
    assert page.url.endswith(f"/sample/{source}/{sid}")
    assert page.inner_text("#sample-id") == sid
    caption = page.inner_text("#caption")
    assert MODEL_CAPTION in caption and CAPTION_MODEL in caption
    assert "coffee" in page.inner_text("#source-caption")
    [placed] = [r for r in exports(corpus.settings, source) if r["sample_id"] == sid]
    shard_text = page.inner_text("#placements .shard")
    assert placed["shard"] in shard_text and f"index {placed['index_in_shard']}" in shard_text
    assert all(width > 0 for width in _loaded_images(page))  # the preview decoded


def test_filter_skipped_then_see_why(page, live_server, corpus):
    page.goto(live_server + "/")
    page.select_option("select[name=source]", "web")
    page.select_option("select[name=skipped]", "yes")
    page.click("#search-button")
    page.wait_for_selector("#results .card")
    reasons = sidecar_reasons(corpus.settings.mds_root)
    web_ids = {s for (src, _), s in corpus.ids.items() if src == "web"}
    shown = set(page.eval_on_selector_all("#results .card", "els => els.map(e => e.dataset.sampleId)"))
    assert shown == set(reasons) & web_ids
    sid = corpus.sid("web", "web-0002")
    page.click(f'.card[data-sample-id="{sid}"] a.open')
    page.wait_for_selector("#skips")
    skips = page.inner_text("#skips")
    assert "dedup" in skips and "label:nsfw" in skips and "kept copy" in skips


def test_more_like_this_and_stats(page, live_server, corpus):
    sid = corpus.sid("archive", "arch-0001")
    page.goto(f"{live_server}/sample/archive/{sid}")
    page.click("#more-like-this")
    page.wait_for_selector("#results .card")
    import lance

    from prx_data.core.paths import StoragePaths

    table = lance.dataset(StoragePaths.from_settings(corpus.settings).raw_table("archive")).to_table(columns=["embedding"])
    assert page.locator("#results .card").count() == table.column("embedding").drop_null().length() - 1  # every other one

    page.goto(live_server + "/stats")
    bars = page.eval_on_selector_all("#chart-tiers g.bar", "els => els.map(e => [e.dataset.label, +e.dataset.value])")
    placed = [r for s in ("archive", "links", "photos", "shards", "web") for r in exports(corpus.settings, s) if r["shard"]]
    assert sum(value for _, value in bars) == len(placed)
    # The charts are drawn: each bar's rectangle has a width on screen.
    widths = page.eval_on_selector_all("#chart-buckets rect", "els => els.map(e => e.getBoundingClientRect().width)")
    assert widths and all(w > 0 for w in widths)
