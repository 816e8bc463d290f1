"""Sample pages, images and neighbours: what they show equals what the tables and sidecars say."""

from __future__ import annotations

import io

import lance
from PIL import Image

from prx_data.core.paths import StoragePaths
from prx_data_tests.explorer.corpus import CAPTION_MODEL, MODEL_CAPTION, PROMPT_VERSION, RECAPTIONED
from prx_data_tests.explorer.helpers import card_ids, exports, section, sidecar_reasons


def test_sample_page_shows_captions_label_phash_and_shard(client, corpus):
    source, key = RECAPTIONED
    sid = corpus.sid(source, key)
    row = (
        lance.dataset(StoragePaths.from_settings(corpus.settings).raw_table(source))
        .to_table(filter=f"sample_id = '{sid}'", columns=["source_caption", "label", "label_model", "phash"])
        .to_pylist()[0]
    )
    html = client.get(f"/sample/{source}/{sid}").text
    assert MODEL_CAPTION in section(html, "caption")
    assert CAPTION_MODEL in section(html, "caption") and PROMPT_VERSION in section(html, "caption")
    assert row["source_caption"] in section(html, "source-caption")
    assert row["label"] in section(html, "label") and row["label_model"] in section(html, "label")
    assert f"{row['phash'] & (2**64 - 1):016x}" in section(html, "phash")
    [placed] = [r for r in exports(corpus.settings, source) if r["sample_id"] == sid]
    placements = section(html, "placements")
    assert f'<code>{placed["shard"]}</code> index <b class="index">{placed["index_in_shard"]}</b>' in placements
    assert "file not found" not in placements


def test_skipped_sample_lists_every_sidecar_reason(client, corpus):
    reasons = sidecar_reasons(corpus.settings.mds_root)
    sid = corpus.sid("web", "web-0002")  # a duplicate of an archive photo, labelled nsfw
    assert reasons[sid] == {"dedup", "label:nsfw"}
    skips = section(client.get(f"/sample/web/{sid}").text, "skips")
    assert "never yields this sample" in skips
    for reason in reasons[sid]:
        assert f'<b class="reason">{reason}</b>' in skips
    assert "kept copy" in skips  # the dedup sidecar names the copy that stayed


def test_dropped_and_unskipped_samples_say_so(client, corpus):
    drops = {r["sample_id"]: r["drop_reason"] for r in exports(corpus.settings, "photos") if r["drop_reason"]}
    sid, reason = next(iter(sorted(drops.items())))
    html = client.get(f"/sample/photos/{sid}").text
    assert reason in section(html, "drop-reason")
    assert "Not skipped" in section(html, "skips")


def test_invalid_image_sample_page_shows_status_and_error(client, corpus):
    sid = corpus.sid("web", "web-0006")
    status = section(client.get(f"/sample/web/{sid}").text, "status")
    assert "invalid_image" in status


def test_thumbnail_and_preview_are_small_jpegs(client, corpus):
    sid = corpus.sid(*RECAPTIONED)
    for route, side in (("thumb", 256), ("preview", 1024)):
        response = client.get(f"/{route}/{RECAPTIONED[0]}/{sid}")
        assert response.status_code == 200 and response.headers["content-type"] == "image/jpeg"
        image = Image.open(io.BytesIO(response.content))
        assert image.format == "JPEG" and max(image.size) <= side


def test_undecodable_image_gets_a_placeholder(client, corpus):
    response = client.get(f"/thumb/web/{corpus.sid('web', 'web-0006')}")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("image/svg+xml")
    assert response.headers["x-prx-preview"] == "unavailable"


def test_unknown_sample_is_404(client):
    for url in ("/sample/web/" + "0" * 32, "/thumb/web/" + "0" * 32, "/lookup?id=" + "0" * 32):
        assert client.get(url).status_code == 404, url


def test_lookup_redirects_to_the_source_of_an_id(client, corpus):
    sid = corpus.sid("shards", "000001")
    response = client.get(f"/lookup?id={sid.upper()}", follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"] == f"/sample/shards/{sid}"


def test_more_like_this_by_embedding(client, corpus):
    sid = corpus.sid("archive", "arch-0001")
    page = client.get(f"/sample/archive/{sid}").text
    assert f'href="/similar/archive/{sid}"' in page
    found = card_ids(client.get(f"/similar/archive/{sid}").text)
    archive = {s for (src, _), s in corpus.ids.items() if src == "archive"}
    assert found == archive - {sid}  # 7 rows, k=24: every other one, never itself
    other = corpus.sid("web", "web-0001")
    assert "more-like-this" not in client.get(f"/sample/web/{other}").text
    assert client.get(f"/similar/web/{other}").status_code == 404
