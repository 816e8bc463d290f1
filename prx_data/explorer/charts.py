"""Horizontal bar charts as inline SVG, drawn on the server.

No chart library and no script: the machine may be offline and the page's security policy
allows no JavaScript. Every label is escaped here, since it comes from the data.
"""

from __future__ import annotations

from html import escape

from markupsafe import Markup

BAR_HEIGHT = 18
GAP = 6
LABEL_WIDTH = 260
BAR_WIDTH = 360
VALUE_WIDTH = 90
COLOURS = ("#2563eb", "#16a34a", "#dc2626", "#9333ea", "#ea580c", "#0891b2")


def bar_chart(title: str, items: list[tuple[str, int]], colour: str = COLOURS[0]) -> Markup:
    """One bar per (label, value), longest bar = largest value, value printed at its end."""
    width = LABEL_WIDTH + BAR_WIDTH + VALUE_WIDTH
    if not items:
        return Markup(
            f'<svg class="chart" role="img" aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg" '
            f'width="{width}" height="{BAR_HEIGHT + 2 * GAP}"><title>{escape(title)}</title>'
            f'<text x="0" y="{BAR_HEIGHT}" font-size="12" fill="#6b7280">nothing to show</text></svg>'
        )
    top = max(value for _, value in items) or 1
    total = sum(value for _, value in items) or 1
    height = len(items) * (BAR_HEIGHT + GAP) + GAP
    parts = [
        f'<svg class="chart" role="img" aria-label="{escape(title)}" xmlns="http://www.w3.org/2000/svg" '
        f'width="{width}" height="{height}" viewBox="0 0 {width} {height}"><title>{escape(title)}</title>'
    ]
    for i, (label, value) in enumerate(items):
        y = GAP + i * (BAR_HEIGHT + GAP)
        bar = max(1, round(BAR_WIDTH * value / top)) if value else 0
        share = 100 * value / total
        parts.append(
            f'<g class="bar" data-label="{escape(str(label))}" data-value="{int(value)}">'
            f'<text x="{LABEL_WIDTH - 8}" y="{y + BAR_HEIGHT - 5}" text-anchor="end" font-size="12" '
            f'font-family="monospace" fill="#111827">{escape(str(label))}</text>'
            f'<rect x="{LABEL_WIDTH}" y="{y}" width="{bar}" height="{BAR_HEIGHT}" fill="{colour}" rx="2"/>'
            f'<text x="{LABEL_WIDTH + bar + 6}" y="{y + BAR_HEIGHT - 5}" font-size="12" fill="#374151">'
            f"{int(value)} ({share:.0f}%)</text></g>"
        )
    parts.append("</svg>")
    return Markup("".join(parts))
