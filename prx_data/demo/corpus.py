"""An offline demo corpus: every source shape, every kind of bad item, known duplicates.

``build_demo_corpus(root)`` writes source data and one YAML spec per source under ``root`` and
returns a :class:`DemoManifest` saying what a correct pipeline should find in it: how many
items each source holds, which items are broken and with which status, which items are
duplicates of which, which are text-heavy, too small or too oddly shaped to export.

Only images shipped inside installed packages (scikit-image's sample data) or drawn here are
used, so the corpus builds without a network, and the same seed gives the same bytes.

Layout under ``root``::

    sources/<name>.yaml     one spec per source, locations relative to sources/
    photos/...              image_folder, nested folders, .txt/.json sidecar captions
    web/part-0000N.parquet  parquet with inline image bytes
    links/links.jsonl       jsonl with image paths, links/images/ holds the files
    shards/shard-0000N.tar  webdataset tars
    archive/archive.lance   an existing Lance table with embeddings
    remote/remote.jsonl     jsonl with http(s)/ftp URLs (only when url_base is given)
    http/...                the files to serve at url_base (only when url_base is given)
    manifest.json           the manifest, as JSON
"""

from __future__ import annotations

import hashlib
import io
import json
import random
import shutil
import tarfile
import threading
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import yaml
from PIL import Image

from prx_data.core.schema import Status
from prx_data.demo import images as im
from prx_data.ingest.registry import CheckThresholds, SourceSpec

ItemRef = tuple[str, str]  # (source name, key inside the source)

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".gif", ".webp", ".bmp", ".tif", ".tiff")
EMBEDDING_DIM = 16

# Tier floor and aspect range from docs/bucketing.md; used only to label items, never to filter them.
MIN_PIXELS = 384 * 384
MIN_ASPECT, MAX_ASPECT = 0.5, 2.0

# Ordinary captioned photos in the image folder (``gallery/``), so that documents, slides and
# screenshots are a few percent of what is exported, as in PRX's data (5 of about 130).
GALLERY_PHOTOS = 100
GALLERY_SUBJECTS = (
    ("astronaut.png", "astronaut"),
    ("coffee.png", "coffee cup"),
    ("rocket.jpg", "rocket"),
    ("chelsea.png", "cat"),
    ("motorcycle_left.png", "motorcycle"),
    ("hubble_deep_field.jpg", "night sky"),
    ("retina.jpg", "retina scan"),
    ("brick.png", "brick wall"),
    ("grass.png", "lawn"),
    ("gravel.png", "gravel path"),
    ("moon.png", "moon"),
    ("camera.png", "photographer"),
    ("coins.png", "coins"),
    ("color.png", "colour wheel"),
    ("cell.png", "cell under a microscope"),
    ("horse.png", "horse"),
    ("ihc.png", "tissue sample"),
)

# Files under http/ that a test server must answer with extra headers (path relative to http/).
DEMO_HTTP_HEADERS: dict[str, dict[str, str]] = {"noai/portrait.jpg": {"X-Robots-Tag": "noai"}}

# Folders and files the builder owns under root; everything else there is left untouched.
_OWNED = ("sources", "photos", "web", "links", "shards", "archive", "remote", "http", "manifest.json")


@dataclass(frozen=True)
class DemoItem:
    """One item as a reader should see it.

    ``width``/``height`` are as displayed (EXIF orientation applied), set for every item whose
    bytes decode. ``caption`` is stripped of surrounding whitespace. ``license`` is the
    record's own license or, failing that, the spec's. ``path`` is where the bytes live,
    relative to the corpus root (None for bytes stored inline in a table or a tar).
    """

    key: str
    status: str
    caption: str | None = None
    license: str | None = None
    url: str | None = None
    width: int | None = None
    height: int | None = None
    path: str | None = None


@dataclass
class DemoSource:
    name: str
    shape: str
    spec_path: Path
    location: Path
    priority: int
    items: list[DemoItem] = field(default_factory=list)

    @property
    def count(self) -> int:
        """Items as stored: files, records, tar samples or rows; a repeated key counts twice."""
        return len(self.items)

    @property
    def keys(self) -> list[str]:
        return [item.key for item in self.items]

    @property
    def unique_count(self) -> int:
        return len(set(self.keys))

    @property
    def duplicate_keys(self) -> list[str]:
        return sorted(k for k, n in Counter(self.keys).items() if n > 1)


@dataclass
class DemoManifest:
    """What the corpus holds and what ingestion, dedup and export should make of it.

    Item references are ``(source, key)`` pairs. ``exact_duplicates`` groups items whose image
    bytes are identical; ``near_duplicates`` groups items that show the same picture
    (identical, re-encoded at another JPEG quality, or resized), so each exact group lies
    inside a near group. ``too_small`` (under 384² pixels as displayed) and ``bad_aspect``
    (width/height outside 0.5-2.0) list only ``ok`` items; no item sits near either limit.
    ``text_heavy`` lists documents, slides and screenshots (many lines of text), not banners.
    ``http_headers`` maps a file under ``root/http`` to headers the server must send.
    """

    root: Path
    sources_dir: Path
    seed: int
    url_base: str | None
    sources: dict[str, DemoSource]
    exact_duplicates: list[list[ItemRef]]
    near_duplicates: list[list[ItemRef]]
    text_heavy: list[ItemRef]
    too_small: list[ItemRef]
    bad_aspect: list[ItemRef]
    http_headers: dict[str, dict[str, str]]

    @property
    def counts(self) -> dict[str, int]:
        return {name: src.count for name, src in self.sources.items()}

    @property
    def bad(self) -> dict[ItemRef, str]:
        """Every deliberately bad item and the status ingestion should give it."""
        return {(name, item.key): item.status for name, src in self.sources.items() for item in src.items if item.status != Status.OK.value}

    @property
    def statuses(self) -> dict[ItemRef, str]:
        return {(name, item.key): item.status for name, src in self.sources.items() for item in src.items}

    def item(self, source: str, key: str) -> DemoItem:
        """The first item with this key (a repeated key's records all share its status)."""
        for item in self.sources[source].items:
            if item.key == key:
                return item
        raise KeyError((source, key))

    def to_json(self) -> dict:
        return {
            "root": str(self.root),
            "sources_dir": str(self.sources_dir),
            "seed": self.seed,
            "url_base": self.url_base,
            "sources": {
                name: {
                    "shape": src.shape,
                    "spec_path": str(src.spec_path),
                    "location": str(src.location),
                    "priority": src.priority,
                    "count": src.count,
                    "duplicate_keys": src.duplicate_keys,
                    "items": [asdict(item) for item in src.items],
                }
                for name, src in self.sources.items()
            },
            "exact_duplicates": [[list(r) for r in g] for g in self.exact_duplicates],
            "near_duplicates": [[list(r) for r in g] for g in self.near_duplicates],
            "text_heavy": [list(r) for r in self.text_heavy],
            "too_small": [list(r) for r in self.too_small],
            "bad_aspect": [list(r) for r in self.bad_aspect],
            "http_headers": self.http_headers,
        }


# --- building -----------------------------------------------------------------------------


def _subject(payload: _Payload) -> str:
    """What an alt text would say the picture shows."""
    return "document" if payload.text else (payload.same_as or "a scene").replace("_", " ")


@dataclass
class _Payload:
    """Bytes of one item plus what the manifest needs to know about them."""

    data: bytes | None
    status: str = Status.OK.value
    size: tuple[int, int] | None = None  # as displayed
    same_as: str | None = None  # label of the picture, shared by every copy of it
    text: bool = False

    @property
    def content(self) -> bytes:
        # Only a missing image has no bytes, and nothing writes, cuts or hashes one of those.
        if self.data is None:
            raise ValueError(f"a {self.status} payload has no bytes")
        return self.data

    @property
    def displayed_size(self) -> tuple[int, int]:
        if self.size is None:
            raise ValueError(f"a {self.status} payload has no displayed size")
        return self.size


def _ok(data: bytes, size: tuple[int, int], *, same_as: str | None = None, text: bool = False) -> _Payload:
    return _Payload(data, Status.OK.value, size, same_as, text)


def _bad(data: bytes | None, status: Status, size: tuple[int, int] | None = None) -> _Payload:
    return _Payload(data, status.value, size)


class _Builder:
    def __init__(self, root: Path, seed: int, url_base: str | None):
        self.root = root
        self.seed = seed
        self.url_base = url_base.rstrip("/") if url_base else None
        self.rng = random.Random(seed)
        self.sources: dict[str, DemoSource] = {}
        self.payloads: dict[ItemRef, _Payload] = {}
        self._photo_cache: dict[tuple, Image.Image] = {}

    # shared pictures: the originals every duplicate is derived from -------------------------

    def picture(self, name: str, size: tuple[int, int] | None = None, mode: str = "RGB") -> Image.Image:
        cache_key = (name, size, mode)
        if cache_key not in self._photo_cache:
            self._photo_cache[cache_key] = im.photo(name, size, mode)
        return self._photo_cache[cache_key]

    def sub_rng(self, label: str) -> random.Random:
        # One stream per drawing, so adding a drawing never changes the others.
        digest = hashlib.sha256(f"{self.seed}:{label}".encode()).digest()
        return random.Random(int.from_bytes(digest[:8], "big"))

    def drawn(self, kind: str, label: str, size: tuple[int, int], **kwargs) -> Image.Image:
        return getattr(im, kind)(size, self.sub_rng(label), **kwargs)

    # bookkeeping -----------------------------------------------------------------------

    def source(self, name: str, shape: str, location: str, priority: int, spec: dict) -> DemoSource:
        sources_dir = self.root / "sources"
        spec_path = sources_dir / f"{name}.yaml"
        body = {"name": name, "shape": shape, "location": location, "priority": priority, **spec}
        SourceSpec.model_validate(body)  # fail here, not in a test far away
        spec_path.write_text(yaml.safe_dump(body, sort_keys=False))
        src = DemoSource(name, shape, spec_path, (sources_dir / location).resolve(), priority)
        self.sources[name] = src
        return src

    def add(self, src: DemoSource, key: str, payload: _Payload, **meta) -> None:
        size = payload.size
        src.items.append(DemoItem(key, payload.status, width=size[0] if size else None, height=size[1] if size else None, **meta))
        self.payloads.setdefault((src.name, key), payload)

    def write(self, rel: str, data: bytes) -> str:
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return rel

    # the sources -----------------------------------------------------------------------

    def build(self) -> DemoManifest:
        (self.root / "sources").mkdir(parents=True, exist_ok=True)
        pics = self._pictures()
        self._photos(pics)
        self._web(pics)
        self._links(pics)
        self._shards(pics)
        self._archive(pics)
        if self.url_base:
            self._remote(pics)
        for src in self.sources.values():
            self._declare_expected_noise(src)
        return self._manifest()

    def _declare_expected_noise(self, src: DemoSource) -> None:
        """Write into the spec how broken the source is on purpose (its broken files, links and
        alt-text captions), so its checks are green while it is as built and fail, naming the
        rows, when it gets worse. A real source declares the same (`checks:` in its spec)."""
        items = list({i.key: i for i in src.items}.values())  # a repeated key is one row
        ok = [i for i in items if i.status == "ok"]
        captioned = [i.caption for i in ok if i.caption]
        error_share = sum(i.status not in ("ok", "opted_out") for i in items) / max(1, len(items))
        coverage = len(captioned) / max(1, len(ok))
        outliers = sum(not 2 <= len(caption.split()) <= 300 for caption in captioned) / max(1, len(captioned))
        slack = 0.02  # the demo's counts are exact; the slack only keeps float rounding out
        defaults = CheckThresholds()
        checks = {}
        if error_share > defaults.max_error_share:
            checks["max_error_share"] = round(min(1.0, error_share + slack), 2)
        if coverage < defaults.min_caption_coverage:
            checks["min_caption_coverage"] = round(max(0.0, coverage - slack), 2)
        if outliers > defaults.max_caption_length_outliers:
            checks["max_caption_length_outliers"] = round(min(1.0, outliers + slack), 2)
        if checks:
            body = yaml.safe_load(src.spec_path.read_text())
            body["checks"] = checks
            SourceSpec.model_validate(body)
            src.spec_path.write_text(yaml.safe_dump(body, sort_keys=False))

    def _pictures(self) -> dict[str, _Payload]:
        """Encoded pictures that appear in more than one place, encoded once."""
        astronaut = self.picture("astronaut.png", (1024, 1024))
        coffee = self.picture("coffee.png", (1200, 800))
        rocket = self.picture("rocket.jpg", (1280, 854))
        retina = self.picture("retina.jpg")
        return {
            "astronaut": _ok(im.jpeg_bytes(astronaut, 90), astronaut.size, same_as="astronaut"),
            "coffee": _ok(im.jpeg_bytes(coffee, 90), coffee.size, same_as="coffee"),
            "coffee_q92": _ok(im.jpeg_bytes(coffee, 92), coffee.size, same_as="coffee"),
            "coffee_q75": _ok(im.jpeg_bytes(coffee, 75), coffee.size, same_as="coffee"),
            "coffee_half": _ok(im.jpeg_bytes(coffee.resize((600, 400), Image.Resampling.LANCZOS), 90), (600, 400), same_as="coffee"),
            "rocket": _ok(im.jpeg_bytes(rocket, 90), rocket.size, same_as="rocket"),
            "retina": _ok(im.jpeg_bytes(retina, 88), retina.size, same_as="retina"),
        }

    def _photos(self, pics: dict[str, _Payload]) -> None:
        src = self.source(
            "photos",
            "image_folder",
            "../photos",
            10,
            {
                "license": "CC0-1.0",
                "description": "Demo image folder: scikit-image sample photos and drawn images, "
                "with .txt/.json sidecar captions and every kind of broken file.",
            },
        )
        rng = self.sub_rng("photos")
        grass = self.picture("grass.png", (768, 768), "L")
        motorcycle = self.picture("motorcycle_left.png", (1482, 1000))
        camera = np.asarray(self.picture("camera.png", None, "L"), dtype=np.uint16) * 257
        cell = self.picture("cell.png", (825, 990), "L")
        hubble = self.picture("hubble_deep_field.jpg")
        ihc = self.picture("ihc.png").quantize(63, dither=Image.Dither.NONE)
        ihc.paste(63, (300, 300, 480, 480))  # index 63 is the transparent hole
        logo = self.picture("logo.png", None, "RGBA")
        chelsea = self.picture("chelsea.png", (300, 200))
        coins = self.picture("coins.png", (320, 252), "L")
        frames = im.gif_frames((480, 480), self.sub_rng("gif"))
        banner = self.drawn("banner", "photos/banner", (1600, 400), text="Summer sale - 50% off")
        tower = self.drawn("banner", "photos/tower", (400, 1600), text="Grand opening today")
        icon = self.drawn("shapes", "photos/icon", (64, 64), n=3)
        doc = self.drawn("document", "photos/document", (850, 1100), columns=1)
        shot = self.drawn("screenshot", "photos/screenshot", (1280, 800))
        shapes = self.drawn("shapes", "photos/shapes", (1024, 768))
        grad = self.drawn("gradient", "photos/gradient", (1024, 1024))
        text_file = ("Meeting notes\n" + "\n".join(im.sentence(rng) for _ in range(12)) + "\n").encode()

        # (relative path, payload, caption sidecar: "txt", "json" or None)
        files: list[tuple[str, _Payload, str | None]] = [
            ("cover.jpg", _ok(im.jpeg_bytes(grass, 90), grass.size), "txt"),
            ("landscape/astronaut.jpg", pics["astronaut"], "txt"),
            ("landscape/coffee.jpg", pics["coffee"], "json"),
            ("landscape/rocket.jpg", pics["rocket"], None),
            ("city/night/motorcycle.jpg", _ok(im.jpeg_bytes(motorcycle, 90), motorcycle.size), "txt"),
            ("science/retina.jpg", pics["retina"], "json"),
            ("science/camera_16bit.png", _ok(im.png_bytes(Image.fromarray(camera)), (512, 512)), "txt"),
            ("science/cell_exif6.jpg", _ok(im.exif_rotated_jpeg(cell), cell.size), "txt"),
            ("odd/hubble_cmyk.jpg", _ok(im.jpeg_bytes(hubble.convert("CMYK"), 90), hubble.size), "json"),
            ("odd/ihc_palette.png", _ok(im.png_bytes(ihc, transparency=63), ihc.size), None),
            ("odd/logo_rgba.png", _ok(im.png_bytes(logo), logo.size), "txt"),
            ("odd/animated.gif", _ok(im.gif_bytes(frames), frames[0].size), "txt"),
            ("broken/empty.jpg", _bad(b"", Status.INVALID_IMAGE), None),
            ("broken/truncated.jpg", _bad(pics["coffee"].content[: len(pics["coffee"].content) // 2], Status.INVALID_IMAGE), "txt"),
            ("broken/notes.jpg", _bad(text_file, Status.INVALID_IMAGE), None),
            ("broken/bomb.png", _bad(im.bomb_png(20_000, 20_000), Status.TOO_LARGE), "txt"),
            ("small/chelsea.jpg", _ok(im.jpeg_bytes(chelsea, 90), chelsea.size), "txt"),
            ("small/coins.png", _ok(im.png_bytes(coins), coins.size), None),
            ("small/icon.png", _ok(im.png_bytes(icon), icon.size), "json"),
            ("wide/banner.png", _ok(im.png_bytes(banner), banner.size), "txt"),
            ("wide/tower.jpg", _ok(im.jpeg_bytes(tower, 90), tower.size), None),
            ("text/document.png", _ok(im.png_bytes(doc), doc.size, text=True), "txt"),
            ("text/screenshot.png", _ok(im.png_bytes(shot), shot.size, text=True), None),
            ("drawn/shapes.png", _ok(im.png_bytes(shapes), shapes.size), "json"),
            ("drawn/gradient.jpg", _ok(im.jpeg_bytes(grad, 90), grad.size), None),
        ]
        files += self._gallery()
        for rel, payload, sidecar in files:
            path = self.write(f"photos/{rel}", payload.content)
            caption = None
            if sidecar:
                caption = im.alt_text(rng, Path(rel).stem)
                stem = (self.root / path).with_suffix("")
                if sidecar == "txt":
                    stem.with_suffix(".txt").write_text(caption + "\n")
                else:
                    stem.with_suffix(".json").write_text(json.dumps({"caption": caption, "photographer": "demo"}))
            self.add(src, rel, payload, caption=caption, license="CC0-1.0", path=path)

    def _gallery(self) -> list[tuple[str, _Payload, str | None]]:
        """Ordinary photos, so documents and screenshots are a few percent of the corpus (as in
        PRX's data) rather than a third: distinct crops of the sample photos, captioned."""
        rng = self.sub_rng("gallery")
        sizes = ((640, 480), (480, 640), (576, 576), (720, 480))
        out: list[tuple[str, _Payload, str | None]] = []
        for k in range(GALLERY_PHOTOS):
            name, subject = GALLERY_SUBJECTS[k % len(GALLERY_SUBJECTS)]
            base = self.picture(name)
            w, h = base.size
            scale = rng.uniform(0.45, 0.8)  # well below the whole picture: no near-copy of it
            cw, ch = max(32, int(w * scale)), max(32, int(h * scale * rng.uniform(0.75, 1.25)))
            cw, ch = min(cw, w), min(ch, h)
            x, y = rng.randint(0, w - cw), rng.randint(0, h - ch)
            size = sizes[rng.randrange(len(sizes))]
            crop = base.crop((x, y, x + cw, y + ch)).resize(size, Image.Resampling.LANCZOS)
            if rng.random() < 0.5:
                crop = crop.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
            out.append((f"gallery/{subject.replace(' ', '_')}-{k:03d}.jpg", _ok(im.jpeg_bytes(crop, 90), size), "txt"))
        return out

    def _web(self, pics: dict[str, _Payload]) -> None:
        default_license = "unknown"
        src = self.source(
            "web",
            "parquet",
            "../web/*.parquet",
            0,
            {
                "license": default_license,
                "description": "Demo web scrape: parquet with inline image bytes and alt text.",
                "fields": {
                    "key": "key",
                    "image": "image_bytes",
                    "image_kind": "bytes",
                    "caption": "alt_text",
                    "license": "license",
                    "url": "url",
                },
            },
        )
        color = self.picture("color.png", (256, 256))
        shot = self.drawn("screenshot", "web/screenshot", (1440, 900))
        shapes = self.drawn("shapes", "web/shapes", (900, 900))
        grad = self.drawn("gradient", "web/gradient", (1280, 960))
        banner = self.drawn("banner", "web/banner", (2000, 500), text="Free shipping on all orders")
        html = b"<!doctype html><html><head><title>404 Not Found</title></head><body>gone</body></html>"
        # (key, payload, alt text, license): alt text as scraped, i.e. often useless
        rows = [
            ("web-0001", pics["astronaut"], "Astronaut portrait, NASA", "public-domain"),
            ("web-0002", pics["coffee_q75"], "IMG_2041.JPG", "cc-by-4.0"),
            ("web-0003", _ok(im.png_bytes(shot), shot.size, text=True), "screenshot of the dashboard", "cc-by-sa-4.0"),
            ("web-0005", _ok(im.png_bytes(shapes), shapes.size), "click to enlarge", "cc-by-4.0"),
            ("web-0006", _bad(pics["rocket"].content[:20_000], Status.INVALID_IMAGE), "rocket launch", "cc-by-4.0"),
            ("web-0007", _bad(None, Status.MISSING), "image unavailable", None),
            ("web-0008", _bad(html, Status.INVALID_IMAGE), "", "cc-by-4.0"),
            ("web-0009", _ok(im.jpeg_bytes(color, 90), color.size), None, "cc0-1.0"),
            ("web-0010", _ok(im.jpeg_bytes(banner, 85), banner.size), "banner", None),
            ("web-0011", _ok(im.jpeg_bytes(grad, 90), grad.size), "abstract background wallpaper hd", "cc-by-4.0"),
        ]
        (self.root / "web").mkdir(parents=True, exist_ok=True)
        for part, chunk in enumerate((rows[:6], rows[6:])):
            table = pa.table(
                {
                    "key": pa.array([r[0] for r in chunk], pa.string()),
                    "image_bytes": pa.array([r[1].data for r in chunk], pa.binary()),
                    "alt_text": pa.array([r[2] for r in chunk], pa.string()),
                    "license": pa.array([r[3] for r in chunk], pa.string()),
                    "url": pa.array([f"https://example.com/media/{r[0]}.jpg" for r in chunk], pa.string()),
                }
            )
            pq.write_table(table, self.root / "web" / f"part-{part:05d}.parquet", compression="zstd")
            for key, payload, alt, lic in chunk:
                self.add(
                    src,
                    key,
                    payload,
                    caption=(alt or "").strip() or None,  # readers treat blank as no caption
                    license=lic or default_license,
                    url=f"https://example.com/media/{key}.jpg",
                )

    def _links(self, pics: dict[str, _Payload]) -> None:
        src = self.source(
            "links",
            "jsonl",
            "../links/links.jsonl",
            2,
            {
                "license": "cc-by-4.0",
                "description": "Demo jsonl with image paths. Paths read the same from the spec's "
                "folder and from the jsonl's folder (both sit one level under the corpus root).",
                "fields": {"key": "id", "image": "path", "image_kind": "path", "caption": "caption", "license": "license"},
            },
        )
        gravel = self.picture("gravel.png", (640, 640), "L")
        moon = self.picture("moon.png", None, "L")
        letter = self.drawn("document", "links/letter", (1000, 1300), columns=2)
        shapes = self.drawn("shapes", "links/shapes", (800, 600), n=20)
        moon_p = _ok(im.jpeg_bytes(moon, 90), moon.size)
        # (key, file under links/images or None when the file is deliberately absent, payload)
        records = [
            ("link-001", "gravel.jpg", _ok(im.jpeg_bytes(gravel, 90), gravel.size), "gravel texture"),
            ("link-002", "letter.png", _ok(im.png_bytes(letter), letter.size, text=True), "two-column newsletter"),
            ("link-003", "missing.jpg", _bad(None, Status.MISSING), "a file that was never copied"),
            ("link-004", "gone/deleted.png", _bad(None, Status.MISSING), "a file that was deleted"),
            ("link-005", "moon.jpg", moon_p, "the moon"),
            ("link-006", "rocket.jpg", pics["rocket"], "rocket on the launch pad"),
            # The same key again, as when a listing is re-exported with an edited caption.
            ("link-005", "moon.jpg", moon_p, "the moon, full"),
            ("link-007", "shapes.png", _ok(im.png_bytes(shapes), shapes.size), None),
        ]
        lines = []
        for key, name, payload, caption in records:
            rel = f"links/images/{name}"
            if payload.data is not None and not (self.root / rel).exists():
                self.write(rel, payload.data)
            record = {"id": key, "path": f"../{rel}", "caption": caption}
            if key == "link-002":
                record["license"] = "cc-by-nc-4.0"
            lines.append(json.dumps(record))
            self.add(src, key, payload, caption=caption, license=record.get("license", "cc-by-4.0"), path=rel)
        (self.root / "links" / "links.jsonl").write_text("\n".join(lines) + "\n")

    def _shards(self, pics: dict[str, _Payload]) -> None:
        src = self.source(
            "shards",
            "webdataset",
            "../shards/*.tar",
            3,
            {
                "license": "cc-by-4.0",
                "description": "Demo WebDataset: <key>.jpg|png, <key>.txt caption, <key>.json metadata with license and url.",
                "fields": {"caption": "txt", "license": "license", "url": "url"},
            },
        )
        brick = self.picture("brick.png", (700, 700), "L")
        tiny = self.picture("microaneurysms.png", None, "RGB")
        slide = self.drawn("slide", "shards/slide", (1600, 900))
        shapes = self.drawn("shapes", "shards/shapes", (1000, 800), n=10)
        tall = self.drawn("banner", "shards/tall", (500, 1500), text="New arrivals this week")
        grad = self.drawn("gradient", "shards/gradient", (1100, 700))
        rng = self.sub_rng("shards")
        # (key, ext, payload, has caption)
        samples = [
            [
                ("000000", "jpg", pics["coffee_half"], True),
                ("000001", "png", _ok(im.png_bytes(shapes), shapes.size), True),
                ("000002", "jpg", _ok(im.jpeg_bytes(slide, 90), slide.size, text=True), True),
                ("000003", "jpg", _bad(pics["retina"].content[: len(pics["retina"].content) // 2], Status.INVALID_IMAGE), True),
                ("000004", "jpg", _ok(im.jpeg_bytes(brick, 90), brick.size), False),
            ],
            [
                ("000005", "jpg", pics["retina"], True),
                ("000007", "jpg", _ok(im.jpeg_bytes(tall, 90), tall.size), True),
                ("000008", "png", _ok(im.png_bytes(tiny), tiny.size), True),
                ("000009", "jpg", _ok(im.jpeg_bytes(grad, 90), grad.size), False),
            ],
        ]
        (self.root / "shards").mkdir(parents=True, exist_ok=True)
        for n, shard in enumerate(samples):
            with tarfile.open(self.root / "shards" / f"shard-{n:05d}.tar", "w", format=tarfile.USTAR_FORMAT) as tar:
                for key, ext, payload, has_caption in shard:
                    caption = im.alt_text(rng, _subject(payload)) if has_caption else None
                    url = f"https://example.org/wds/{key}.{ext}"
                    lic = "cc-by-sa-4.0" if int(key) % 3 == 0 else "cc-by-4.0"
                    members = [(f"{key}.{ext}", payload.content)]
                    if caption:
                        members.append((f"{key}.txt", caption.encode()))
                    members.append((f"{key}.json", json.dumps({"license": lic, "url": url}).encode()))
                    for name, data in members:
                        _add_tar_member(tar, name, data)
                    self.add(src, key, payload, caption=caption, license=lic, url=url)

    def _archive(self, pics: dict[str, _Payload]) -> None:
        import lance

        src = self.source(
            "archive",
            "lance",
            "../archive/archive.lance",
            5,
            {
                "license": "cc-by-4.0",
                "description": "Demo pre-existing Lance table with precomputed embeddings.",
                "embedding_dim": EMBEDDING_DIM,
                "fields": {
                    "key": "id",
                    "image": "image",
                    "image_kind": "bytes",
                    "caption": "text",
                    "license": "license",
                    "embedding": "embedding",
                },
            },
        )
        doc = self.drawn("document", "archive/document", (900, 1200), columns=1)
        shapes = self.drawn("shapes", "archive/shapes", (960, 720), n=25)
        tiny = self.drawn("gradient", "archive/tiny", (200, 150))
        rng = self.sub_rng("archive")
        rows = [
            ("arch-0001", pics["coffee_q92"], "cc-by-4.0"),
            ("arch-0002", pics["astronaut"], "public-domain"),
            ("arch-0003", _ok(im.png_bytes(doc), doc.size, text=True), "cc-by-4.0"),
            ("arch-0004", _ok(im.jpeg_bytes(shapes, 90), shapes.size), None),
            ("arch-0005", _bad(bytes(1024), Status.INVALID_IMAGE), "cc-by-4.0"),
            ("arch-0006", _ok(im.jpeg_bytes(tiny, 90), tiny.size), "cc-by-4.0"),
        ]
        captions = [im.alt_text(rng, _subject(payload)) for _key, payload, _lic in rows]
        vectors = np.random.default_rng(self.seed).standard_normal((len(rows), EMBEDDING_DIM)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        table = pa.table(
            {
                "id": pa.array([r[0] for r in rows], pa.string()),
                "image": pa.array([r[1].data for r in rows], pa.binary()),
                "text": pa.array(captions, pa.string()),
                "license": pa.array([r[2] for r in rows], pa.string()),
                "embedding": pa.FixedSizeListArray.from_arrays(pa.array(vectors.ravel(), pa.float32()), EMBEDDING_DIM),
            }
        )
        lance.write_dataset(table, str(self.root / "archive" / "archive.lance"), mode="create")
        for (key, payload, lic), caption in zip(rows, captions):
            self.add(src, key, payload, caption=caption, license=lic or "cc-by-4.0")

    def _remote(self, pics: dict[str, _Payload]) -> None:
        src = self.source(
            "remote",
            "jsonl",
            "../remote/remote.jsonl",
            1,
            {
                "license": "cc-by-4.0",
                "description": "Demo jsonl of image URLs served from the corpus's http/ folder.",
                "fields": {"key": "id", "image": "url", "image_kind": "url", "caption": "caption", "url": "url"},
                "download": {
                    "concurrency": 4,
                    "per_host": 4,
                    "timeout_s": 5.0,
                    "retries": 1,
                    "backoff_s": 0.05,
                    # The demo serves its URLs from this machine; real specs never need this.
                    "allow_networks": ["127.0.0.0/8", "::1/128"],
                },
            },
        )
        horse = self.picture("horse.png", (200, 164), "RGBA")
        doc = self.drawn("document", "remote/document", (1000, 1000), columns=2)
        portrait = self.drawn("shapes", "remote/portrait", (768, 1024), n=8)
        grad = self.drawn("gradient", "remote/gradient", (1000, 750))
        broken = b"<html><body>Please log in to view this image.</body></html>"
        base = self.url_base
        # (key, served file under http/ or None, url, payload)
        records = [
            ("remote-001", "photos/astronaut.jpg", pics["astronaut"], "astronaut"),
            ("remote-002", "photos/horse.png", _ok(im.png_bytes(horse), horse.size), "horse silhouette"),
            ("remote-003", "docs/page.png", _ok(im.png_bytes(doc), doc.size, text=True), "scanned page"),
            ("remote-004", None, _bad(None, Status.DOWNLOAD_FAILED), "dead link"),
            ("remote-005", None, _bad(None, Status.DOWNLOAD_FAILED), "ftp mirror"),
            ("remote-006", "noai/portrait.jpg", _ok(im.jpeg_bytes(portrait, 90), portrait.size), "artist portfolio"),
            ("remote-007", "photos/login.jpg", _bad(broken, Status.INVALID_IMAGE), "login wall"),
            ("remote-008", "photos/gradient.jpg", _ok(im.jpeg_bytes(grad, 90), grad.size), None),
        ]
        lines = []
        for key, name, payload, caption in records:
            if key == "remote-004":
                url = f"{base}/photos/does-not-exist.jpg"
            elif key == "remote-005":
                url = "ftp://ftp.example.invalid/pub/images/0005.jpg"
            else:
                url = f"{base}/{name}"
                self.write(f"http/{name}", payload.content)
            if name in DEMO_HTTP_HEADERS:
                # The file is fine; the server's noai header is what should keep it out.
                payload = _Payload(payload.data, Status.OPTED_OUT.value, payload.size)
            lines.append(json.dumps({"id": key, "url": url, "caption": caption}))
            self.add(src, key, payload, caption=caption, license="cc-by-4.0", url=url, path=f"http/{name}" if name else None)
        (self.root / "remote").mkdir(parents=True, exist_ok=True)
        (self.root / "remote" / "remote.jsonl").write_text("\n".join(lines) + "\n")

    # manifest --------------------------------------------------------------------------

    def _manifest(self) -> DemoManifest:
        by_picture: dict[str, list[ItemRef]] = defaultdict(list)
        by_bytes: dict[str, list[ItemRef]] = defaultdict(list)
        text_heavy, too_small, bad_aspect = [], [], []
        for ref, p in self.payloads.items():
            if p.status != Status.OK.value:
                continue
            by_bytes[hashlib.sha256(p.content).hexdigest()].append(ref)
            if p.same_as:
                by_picture[p.same_as].append(ref)
            if p.text:
                text_heavy.append(ref)
            w, h = p.displayed_size
            _assert_clear_of_limits(ref, w, h)
            if w * h < MIN_PIXELS:
                too_small.append(ref)
            if not MIN_ASPECT <= w / h <= MAX_ASPECT:
                bad_aspect.append(ref)
        exact = [sorted(g) for g in by_bytes.values() if len(g) > 1]
        for group in exact:
            # Every deliberate copy is labelled; an unlabelled collision is a bug in this module.
            assert all(self.payloads[r].same_as for r in group), f"accidental identical bytes: {group}"
        return DemoManifest(
            root=self.root,
            sources_dir=self.root / "sources",
            seed=self.seed,
            url_base=self.url_base,
            sources=self.sources,
            exact_duplicates=sorted(exact),
            near_duplicates=sorted(sorted(g) for g in by_picture.values() if len(g) > 1),
            text_heavy=sorted(text_heavy),
            too_small=sorted(too_small),
            bad_aspect=sorted(bad_aspect),
            http_headers={k: dict(v) for k, v in DEMO_HTTP_HEADERS.items()} if self.url_base else {},
        )


def _assert_clear_of_limits(ref: ItemRef, w: int, h: int) -> None:
    # Items near a limit would make tests depend on rounding in the bucketing code.
    pixels, aspect = w * h, w / h
    assert not 0.8 * MIN_PIXELS <= pixels <= 1.25 * MIN_PIXELS, f"{ref}: {w}x{h} is too close to 384²"
    for limit in (MIN_ASPECT, MAX_ASPECT):
        assert not 0.9 * limit <= aspect <= 1.1 * limit, f"{ref}: aspect {aspect:.2f} is too close to {limit}"


def _add_tar_member(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = 0  # no timestamps: the same seed must give the same bytes
    info.mode = 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    tar.addfile(info, io.BytesIO(data))


def build_demo_corpus(root: Path | str, seed: int = 0, *, url_base: str | None = None, overwrite: bool = False) -> DemoManifest:
    """Write the demo corpus under ``root`` and return what it holds.

    With ``url_base`` (e.g. ``http://127.0.0.1:8123``), also writes ``root/http/`` (to be
    served at that address, see :func:`serve_folder`) and a ``remote`` source of URLs under it.
    ``overwrite`` replaces a corpus already there; otherwise an existing one is an error.
    """
    root = Path(root).resolve()
    # An empty folder is no corpus: callers often create sources/ before asking for one.
    existing = [n for n in _OWNED if (root / n).is_file() or ((root / n).is_dir() and any((root / n).iterdir()))]
    if existing:
        if not overwrite:
            raise FileExistsError(f"{root} already holds {', '.join(existing)}; pass overwrite=True to replace them")
        for name in existing:
            path = root / name
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    root.mkdir(parents=True, exist_ok=True)
    manifest = _Builder(root, seed, url_base).build()
    (root / "manifest.json").write_text(json.dumps(manifest.to_json(), indent=1) + "\n")
    return manifest


# --- serving http/ for tests ------------------------------------------------------------------


class _Handler(SimpleHTTPRequestHandler):
    extra_headers: Mapping[str, Mapping[str, str]] = {}

    def end_headers(self) -> None:
        rel = self.path.split("?", 1)[0].lstrip("/")
        for name, value in self.extra_headers.get(rel, {}).items():
            self.send_header(name, value)
        super().end_headers()

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - signature from the base
        pass


@contextmanager
def serve_folder(folder: Path | str, headers: Mapping[str, Mapping[str, str]] = DEMO_HTTP_HEADERS) -> Iterator[str]:
    """Serve ``folder`` on 127.0.0.1 (a free port) and yield its base URL.

    The folder may not exist yet: start the server, build the corpus with the yielded
    ``url_base``, then ingest. ``headers`` adds response headers per file (relative path).
    """
    handler = type("DemoHandler", (_Handler,), {"extra_headers": headers})
    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(handler, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, name="demo-http", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
