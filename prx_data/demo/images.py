"""Drawing and encoding helpers for the offline demo corpus.

Everything here is deterministic for a given ``random.Random``: no timestamps, fixed encoder
settings, fonts that ship inside Pillow. Photos come from scikit-image's bundled data files,
read straight from disk so that no fetcher (and no network) is ever involved.
"""

from __future__ import annotations

import io
import random
import struct
import zlib
from functools import lru_cache
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

# EXIF tag 0x0112. Orientation 6 means "rotate 90 degrees clockwise to display".
ORIENTATION_TAG = 0x0112

_WORDS = (
    "data model image caption corpus pipeline training dataset source shard bucket table "
    "quality resolution aspect ratio license sample stream index worker cluster storage "
    "report metric budget schedule review design release version change request team "
    "customer product market revenue quarter growth forecast meeting agenda action item "
    "summary result analysis figure section chapter appendix reference method approach "
    "system network memory latency throughput request response server client cache queue "
    "the of and to in for on with by from at as is are was be this that it an or"
).split()


@lru_cache(maxsize=32)
def _font(size: int) -> ImageFont.FreeTypeFont:
    # Pillow's embedded default font: the same glyphs on every machine, no font files needed.
    font = ImageFont.load_default(size=size)
    # Without FreeType Pillow falls back to a fixed-size bitmap font, which has no .size to lay
    # text out by.
    if not isinstance(font, ImageFont.FreeTypeFont):
        raise RuntimeError("the demo images need Pillow built with FreeType (a sized default font)")
    return font


def words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(n))


def sentence(rng: random.Random, lo: int = 5, hi: int = 12) -> str:
    text = words(rng, rng.randint(lo, hi))
    return text[:1].upper() + text[1:] + "."


_SCENES = (
    "a photograph of {s} in soft daylight, with a blurred green background",
    "a close-up photo of {s} on a wooden table, warm light from the left",
    "a wide shot of {s} under a clear blue sky, shadows falling to the right",
    "a colourful picture of {s} against a plain grey wall",
    "an outdoor photo of {s} at dusk, orange light on the horizon",
)
_TEXTY = (
    "a scanned page of a {s} with several paragraphs of printed text and a heading",
    "a screenshot of a {s} showing lines of text, menus and a table of numbers",
    "a presentation {s} with a title and bullet points of text",
)
_TEXT_WORDS = ("document", "screenshot", "slide", "page", "text", "notes")


def alt_text(rng: random.Random, subject: str) -> str:
    """A short alt-text-like caption: visual scenes, or text-heavy ones for documents."""
    subject = subject.replace("_", " ").replace("-", " ").strip() or "an object"
    texty = any(w in subject.lower() for w in _TEXT_WORDS)
    template = rng.choice(_TEXTY if texty else _SCENES)
    text = template.format(s=subject)
    return text[:1].upper() + text[1:] + "."


def _wrap(draw: ImageDraw.ImageDraw, text: str, font, width: int) -> list[str]:
    lines, current = [], ""
    for word in text.split():
        trial = f"{current} {word}".strip()
        if current and draw.textlength(trial, font=font) > width:
            lines.append(current)
            current = word
        else:
            current = trial
    if current:
        lines.append(current)
    return lines


def _color(rng: random.Random, lo: int = 0, hi: int = 255) -> tuple[int, int, int]:
    return (rng.randint(lo, hi), rng.randint(lo, hi), rng.randint(lo, hi))


# --- photos -------------------------------------------------------------------------------


def skimage_data_dir() -> Path:
    try:
        import skimage
    except ImportError as exc:  # pragma: no cover - a dependency of the base install
        raise ImportError("the demo corpus needs scikit-image (a dependency of prx-data): pip install 'scikit-image>=0.24'") from exc
    return Path(skimage.__file__).parent / "data"


def photo(name: str, size: tuple[int, int] | None = None, mode: str | None = "RGB") -> Image.Image:
    """A scikit-image sample photo (file name in ``skimage/data``), optionally resized."""
    with Image.open(skimage_data_dir() / name) as img:
        img.load()
        out = img.convert(mode) if mode and img.mode != mode else img.copy()
    if size and out.size != size:
        out = out.resize(size, Image.Resampling.LANCZOS)
    return out


# --- drawn images -------------------------------------------------------------------------


def gradient(size: tuple[int, int], rng: random.Random) -> Image.Image:
    """Two-colour linear gradient in a random direction, with a soft diagonal band."""
    w, h = size
    c0, c1 = _color(rng, 0, 120), _color(rng, 135, 255)
    horizontal = rng.random() < 0.5
    n = w if horizontal else h
    strip = Image.new("RGB", (n, 1))
    strip.putdata([tuple(int(c0[k] + (c1[k] - c0[k]) * i / max(n - 1, 1)) for k in range(3)) for i in range(n)])
    img = (
        strip.resize((w, h), Image.Resampling.NEAREST)
        if horizontal
        else strip.resize((h, w), Image.Resampling.NEAREST).transpose(Image.Transpose.ROTATE_90)
    )
    # Plain gradients in the same direction share a perceptual hash; a random band breaks that.
    draw = ImageDraw.Draw(img)
    x0 = rng.randint(0, w // 2)
    draw.polygon(
        [(x0, 0), (x0 + w // 4, 0), (x0 + w // 4 - h // 3, h), (x0 - h // 3, h)],
        fill=_color(rng, 60, 220),
    )
    return img


def shapes(size: tuple[int, int], rng: random.Random, n: int = 14) -> Image.Image:
    """Random filled circles, rectangles and lines on a gradient: a 'clip-art' image."""
    img = gradient(size, rng)
    draw = ImageDraw.Draw(img)
    w, h = size
    for _ in range(n):
        x0, y0 = rng.randint(-w // 8, w), rng.randint(-h // 8, h)
        x1, y1 = x0 + rng.randint(w // 12, w // 3), y0 + rng.randint(h // 12, h // 3)
        kind = rng.randint(0, 2)
        fill = _color(rng)
        if kind == 0:
            draw.ellipse((x0, y0, x1, y1), fill=fill, outline=(0, 0, 0), width=3)
        elif kind == 1:
            draw.rectangle((x0, y0, x1, y1), fill=fill)
        else:
            draw.line((x0, y0, x1, y1), fill=fill, width=rng.randint(4, 16))
    return img


def document(size: tuple[int, int], rng: random.Random, *, columns: int = 1, title: str | None = None) -> Image.Image:
    """A page of a report: title, headings, justified-looking paragraphs, a figure box."""
    w, h = size
    paper = (rng.randint(242, 255), rng.randint(240, 252), rng.randint(230, 248))
    img = Image.new("RGB", size, paper)
    draw = ImageDraw.Draw(img)
    margin = rng.randint(w // 14, w // 9)
    body, head = _font(max(12, w // 60)), _font(max(20, w // 26))
    y = margin
    draw.text((margin, y), title or sentence(rng, 3, 6).rstrip("."), font=head, fill=(10, 10, 30))
    y += int(head.size * 1.8)
    draw.line((margin, y - head.size // 2, w - margin, y - head.size // 2), fill=(80, 80, 80), width=2)
    gutter = margin // 2
    col_w = (w - 2 * margin - (columns - 1) * gutter) // columns
    line_h = int(body.size * 1.35)
    fig_col = rng.randrange(columns)
    fig_at = rng.randint(h // 4, h // 2)
    for col in range(columns):
        x, cy = margin + col * (col_w + gutter), y
        drew_fig = False
        while cy < h - margin - line_h:
            if col == fig_col and not drew_fig and cy >= fig_at:
                fh = rng.randint(h // 10, h // 5)
                draw.rectangle((x, cy, x + col_w, cy + fh), fill=_color(rng, 120, 230), outline=(40, 40, 40))
                draw.text((x + 8, cy + fh + 4), f"Figure {rng.randint(1, 9)}: " + words(rng, 5), font=body, fill=(60, 60, 60))
                cy += fh + 2 * line_h
                drew_fig = True
                continue
            if rng.random() < 0.12:
                draw.text((x, cy), f"{rng.randint(1, 9)}.{rng.randint(1, 9)} " + words(rng, 3).title(), font=body, fill=(20, 20, 120))
                cy += int(line_h * 1.5)
                continue
            for line in _wrap(draw, " ".join(sentence(rng) for _ in range(rng.randint(2, 5))), body, col_w):
                if cy >= h - margin - line_h:
                    break
                draw.text((x, cy), line, font=body, fill=(25, 25, 25))
                cy += line_h
            cy += line_h // 2
    draw.text((w // 2 - 10, h - margin // 2 - body.size), str(rng.randint(1, 40)), font=body, fill=(90, 90, 90))
    return img


def slide(size: tuple[int, int], rng: random.Random, *, title: str | None = None) -> Image.Image:
    """A presentation slide: coloured title band, bullet list, footer."""
    w, h = size
    bg, band = _color(rng, 225, 255), _color(rng, 20, 110)
    img = Image.new("RGB", size, bg)
    draw = ImageDraw.Draw(img)
    band_h = h // 5
    draw.rectangle((0, 0, w, band_h), fill=band)
    big, body = _font(h // 14), _font(h // 28)
    draw.text((w // 20, band_h // 3), title or sentence(rng, 3, 5).rstrip("."), font=big, fill=(255, 255, 255))
    y, x = band_h + h // 20, w // 12
    bullet_w = w - 2 * x if rng.random() < 0.5 else w // 2 - x
    while y < h - h // 8:
        draw.ellipse((x - 18, y + body.size // 3, x - 8, y + body.size // 3 + 10), fill=band)
        for line in _wrap(draw, sentence(rng, 6, 16), body, bullet_w):
            draw.text((x, y), line, font=body, fill=(30, 30, 30))
            y += int(body.size * 1.3)
        y += int(body.size // 2)
    if bullet_w < w // 2:
        # Right half: a bar chart, as slides often have.
        bx0, by1 = w // 2 + w // 20, h - h // 6
        for i in range(rng.randint(4, 7)):
            bh = rng.randint(h // 10, h // 2)
            draw.rectangle((bx0 + i * w // 18, by1 - bh, bx0 + i * w // 18 + w // 26, by1), fill=_color(rng, 30, 200))
    draw.text((w // 20, h - h // 12), f"Confidential - page {rng.randint(2, 30)}", font=_font(h // 40), fill=(110, 110, 110))
    return img


def screenshot(size: tuple[int, int], rng: random.Random) -> Image.Image:
    """A desktop app window: title bar, sidebar, toolbar, a table or code listing."""
    w, h = size
    dark = rng.random() < 0.5
    bg = (30, 32, 38) if dark else (250, 250, 250)
    fg = (220, 220, 220) if dark else (30, 30, 30)
    img = Image.new("RGB", size, bg)
    draw = ImageDraw.Draw(img)
    bar = 36
    draw.rectangle((0, 0, w, bar), fill=(60, 60, 66) if dark else (225, 225, 230))
    for i, c in enumerate(((255, 95, 86), (255, 189, 46), (39, 201, 63))):
        draw.ellipse((12 + i * 22, 11, 26 + i * 22, 25), fill=c)
    small, body = _font(13), _font(15)
    draw.text((w // 2 - 80, 10), words(rng, 3).title() + " - Editor", font=small, fill=fg)
    side = rng.randint(w // 7, w // 4)
    draw.rectangle((0, bar, side, h), fill=(40, 42, 50) if dark else (236, 238, 242))
    y = bar + 14
    while y < h - 20:
        draw.text(
            (16, y),
            ("> " if rng.random() < 0.2 else "  ") + rng.choice(_WORDS) + rng.choice((".py", ".md", ".yaml", "/")),
            font=small,
            fill=fg,
        )
        y += 20
    tool_y = bar + 8
    for i in range(rng.randint(3, 6)):
        x0 = side + 16 + i * 96
        draw.rounded_rectangle((x0, tool_y, x0 + 84, tool_y + 26), radius=6, fill=_color(rng, 60, 200))
        draw.text((x0 + 10, tool_y + 6), rng.choice(_WORDS).title(), font=small, fill=(255, 255, 255))
    y, x = tool_y + 44, side + 20
    code = rng.random() < 0.5
    n = 1
    while y < h - 24:
        if code:
            indent = rng.randint(0, 3) * 28
            draw.text((x, y), f"{n:4d}", font=body, fill=(130, 130, 130))
            draw.text(
                (x + 56 + indent, y),
                rng.choice(("def ", "return ", "if ", "for ", ""))
                + words(rng, rng.randint(2, 7)).replace(" ", "_", 1)
                + rng.choice(("()", ":", " = 0", "")),
                font=body,
                fill=_color(rng, 90, 230) if dark else _color(rng, 0, 120),
            )
        else:
            cells = [words(rng, 1), words(rng, 2), f"{rng.randint(0, 99999):,}", f"{rng.random():.3f}"]
            for k, cell in enumerate(cells):
                draw.text((x + k * (w - side) // 4, y), cell, font=body, fill=fg)
            draw.line((x, y + 20, w - 20, y + 20), fill=(70, 70, 80) if dark else (215, 215, 220))
        y += 22
        n += 1
    return img


def banner(size: tuple[int, int], rng: random.Random, text: str) -> Image.Image:
    """A web banner (extreme aspect ratio): gradient, headline, call-to-action button."""
    img = gradient(size, rng)
    draw = ImageDraw.Draw(img)
    w, h = size
    short = min(w, h)
    font = _font(short // 5)
    if w >= h:
        draw.text((short // 4, short // 3), text, font=font, fill=(255, 255, 255))
        draw.rounded_rectangle((w - short, short // 3, w - short // 5, short * 2 // 3), radius=12, fill=(250, 200, 40))
    else:
        y = short // 4
        for word in text.split():
            draw.text((short // 8, y), word, font=font, fill=(255, 255, 255))
            y += int(font.size * 1.4)
    return img


def gif_frames(size: tuple[int, int], rng: random.Random, n: int = 3) -> list[Image.Image]:
    """Frames of a small animation: a ball moving across a fixed background."""
    base = gradient(size, rng)
    w, h = size
    r = min(w, h) // 8
    frames = []
    for i in range(n):
        frame = base.copy()
        cx = r + (w - 2 * r) * i // max(n - 1, 1)
        ImageDraw.Draw(frame).ellipse((cx - r, h // 2 - r, cx + r, h // 2 + r), fill=(220, 30, 30))
        frames.append(frame.quantize(64, dither=Image.Dither.NONE))
    return frames


# --- encoders: fixed settings so the same pixels always give the same bytes -----------------


def jpeg_bytes(img: Image.Image, quality: int = 90, *, exif: Image.Exif | None = None) -> bytes:
    buf = io.BytesIO()
    kwargs = {"exif": exif.tobytes()} if exif is not None else {}
    subsampling = 0 if img.mode in ("L", "CMYK") else 2  # 4:2:0 for colour, explicit for the rest
    img.save(buf, "JPEG", quality=quality, subsampling=subsampling, optimize=False, progressive=False, **kwargs)
    return buf.getvalue()


def png_bytes(img: Image.Image, **kwargs) -> bytes:
    buf = io.BytesIO()
    img.save(buf, "PNG", compress_level=6, optimize=False, **kwargs)
    return buf.getvalue()


def gif_bytes(frames: list[Image.Image], duration_ms: int = 200) -> bytes:
    buf = io.BytesIO()
    frames[0].save(buf, "GIF", save_all=True, append_images=frames[1:], duration=duration_ms, loop=0)
    return buf.getvalue()


def exif_rotated_jpeg(upright: Image.Image, quality: int = 90) -> bytes:
    """JPEG whose stored pixels are ``upright`` turned a quarter, tagged orientation 6.

    A viewer that honours EXIF shows ``upright``; one that ignores it sees W and H swapped.
    """
    stored = upright.transpose(Image.Transpose.ROTATE_90)  # counter-clockwise; 6 turns it back
    exif = Image.Exif()
    exif[ORIENTATION_TAG] = 6
    return jpeg_bytes(stored, quality, exif=exif)


def bomb_png(width: int, height: int) -> bytes:
    """A valid 1-bit all-black PNG of ``width`` x ``height`` written chunk by chunk.

    Built by hand because PIL would first allocate a byte per pixel (hundreds of MB); zlib
    squeezes the all-zero rows about a thousandfold, so the file stays tens of KB.
    """

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    row = b"\x00" * (1 + (width + 7) // 8)  # filter byte 0, then packed bits
    comp = zlib.compressobj(9)
    parts = [comp.compress(row * 256) for _ in range(height // 256)]
    parts.append(comp.compress(row * (height % 256)))
    parts.append(comp.flush())
    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", b"".join(parts)) + chunk(b"IEND", b"")
