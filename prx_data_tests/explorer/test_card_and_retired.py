"""The explorer after ``corpus_report`` and a retirement, on the processed demo corpus: the data
card and its charts at links of their own (the files corpus_report wrote, nothing else of the
tree), and a retired source out of the source filter, the search and the stats, listed as retired."""

from __future__ import annotations

import re
import warnings

import pytest

from prx_data.curation.card_charts import CHARTS
from prx_data.curation.refresh import write_data_card
from prx_data.curation.retire import archive_source
from prx_data.export.tree import card_chart_path
from prx_data_tests.conftest import process_corpus_locally

RETIRED = "links"


@pytest.fixture
def explored(data_root):
    world = process_corpus_locally(data_root)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*httpx2.*")
        from starlette.testclient import TestClient
    from prx_data.explorer.app import build_app

    app = build_app(world["settings"])
    app.state.explorer.catalog._list_ttl_s = 0.0  # each request lists again (a user waits 5 s)
    with TestClient(app) as client:
        yield world, client


def _source_options(html: str) -> list[str]:
    found = re.search(r'<select name="source".*?</select>', html, re.S)
    assert found is not None, html[:2000]
    select = found.group(0)
    return [v for v in re.findall(r'<option value="([^"]*)"', select) if v]


def test_card_and_charts_are_served_and_a_retired_source_leaves(explored) -> None:
    world, client = explored
    assert client.get("/card").status_code == 404  # no card yet: said so, not a blank page
    assert "No data card yet" in client.get("/stats").text

    write_data_card(world["paths"], world["sources"], exclude_labels=())
    card = client.get("/card")
    assert card.status_code == 200 and "# Data card" in card.text
    for name in CHARTS:
        assert f'src="/report/charts/{name}.png"' in card.text and f'id="card-chart-{name}"' in client.get("/stats").text
        png = client.get(f"/report/charts/{name}.png")
        assert png.headers["content-type"] == "image/png"
        assert png.content == open(card_chart_path(world["settings"].mds_root, name), "rb").read()
    assert client.get("/report/data_card.md").text.startswith("# Data card")
    for other in (
        "/report/card_figures.json",
        "/report/charts/nope.png",
        "/report/../sources/links.yaml",
        "/report/charts%2F..%2F..%2Fsources%2Flinks.yaml",
    ):
        assert client.get(other).status_code == 404, other

    before = client.get("/stats").text
    assert RETIRED in _source_options(client.get("/").text) and f"<tr><th>{RETIRED}</th>" in before
    archive_source(world["paths"], RETIRED, reason="spec removed")
    assert RETIRED not in _source_options(client.get("/").text)
    stats = client.get("/stats").text
    assert f"<tr><th>{RETIRED}</th>" not in stats
    assert re.search(rf'id="retired">{RETIRED} \(', stats)
    hits = client.get("/", params={"q": "moon"}).text  # a links caption
    assert f"/sample/{RETIRED}/" not in hits
    assert client.get("/", params={"source": RETIRED}).status_code == 404
