"""The report's charts, as inline SVG: no library, no script, nothing fetched.

Each chart is drawn from numbers the report computed; every mark carries a
``<title>`` (the browser's tooltip) with its exact value.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from chalk_client.report.stats import Bin, MeanCI

FONT = 'font-family="system-ui, sans-serif" font-size="11"'


def _tick(value: float) -> str:
    return f"{value:.3g}"


def histogram_svg(bins: Sequence[Bin], *, width: int = 680, height: int = 240) -> str:
    """A bar per bin, its count above it, the bin's label below."""
    if not bins:
        return '<p class="empty">No scores.</p>'
    left, right, top, bottom = 44, 8, 16, 56
    plot_w, plot_h = width - left - right, height - top - bottom
    tallest = max(b.count for b in bins) or 1
    slot = min(plot_w / len(bins), 120.0)
    gap = min(slot * 0.15, 6)
    parts = [
        f'<svg class="chart histogram" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" role="img" aria-label="score histogram" {FONT}>',
        f'<line x1="{left}" y1="{top + plot_h}" x2="{width - right}" y2="{top + plot_h}" '
        'class="axis"/>',
    ]
    for tick in (0, tallest // 2, tallest) if tallest > 1 else (0, tallest):
        y = top + plot_h - plot_h * tick / tallest
        parts.append(
            f'<text x="{left - 6}" y="{y + 4:.1f}" text-anchor="end" class="tick">{tick:,}</text>'
            f'<line x1="{left}" y1="{y:.1f}" x2="{width - right}" y2="{y:.1f}" class="grid"/>'
        )
    rotate = len(bins) > 8
    for index, b in enumerate(bins):
        x = left + index * slot + gap / 2
        h = plot_h * b.count / tallest
        y = top + plot_h - h
        label = escape(b.label)
        parts.append(
            f'<rect class="bar" x="{x:.1f}" y="{y:.1f}" width="{slot - gap:.1f}" '
            f'height="{h:.1f}" data-count="{b.count}" data-label="{label}">'
            f"<title>score {label}: {b.count:,} job(s)</title></rect>"
        )
        if b.count:
            parts.append(
                f'<text x="{x + (slot - gap) / 2:.1f}" y="{y - 3:.1f}" text-anchor="middle" '
                f'class="value">{b.count:,}</text>'
            )
        cx, cy = x + (slot - gap) / 2, top + plot_h + 14
        if rotate:
            parts.append(
                f'<text x="{cx:.1f}" y="{cy:.1f}" text-anchor="end" class="tick" '
                f'transform="rotate(-40 {cx:.1f} {cy:.1f})">{label}</text>'
            )
        else:
            parts.append(
                f'<text x="{cx:.1f}" y="{cy:.1f}" text-anchor="middle" class="tick">{label}</text>'
            )
    parts.append("</svg>")
    return "".join(parts)


@dataclass(frozen=True)
class Bar:
    """One horizontal bar: its label, its length as a share of the longest, the text beside it."""

    label: str
    share: float
    text: str
    kind: str = ""
    """A CSS class for its colour (e.g. ``grader_error``)."""


def bars_svg(bars: Sequence[Bar], *, width: int = 680, label_w: int = 250) -> str:
    """Horizontal bars with their labels on the left and their values on the right."""
    if not bars:
        return ""
    row, top = 22, 4
    height = top * 2 + row * len(bars)
    value_w = 150
    plot_w = width - label_w - value_w
    parts = [
        f'<svg class="chart bars" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" role="img" {FONT}>'
    ]
    for index, bar in enumerate(bars):
        y = top + index * row
        length = max(plot_w * min(max(bar.share, 0.0), 1.0), 1.0 if bar.share > 0 else 0.0)
        label, text = escape(bar.label), escape(bar.text)
        parts.append(
            f'<text x="{label_w - 8}" y="{y + 15}" text-anchor="end" class="tick">{label}</text>'
            f'<rect class="bar {escape(bar.kind)}" x="{label_w}" y="{y + 4}" width="{length:.1f}" '
            f'height="{row - 8}"><title>{label}: {text}</title></rect>'
            f'<text x="{label_w + length + 6:.1f}" y="{y + 15}" class="value">{text}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def intervals_svg(rows: Sequence[tuple[str, MeanCI]], *, width: int = 680) -> str:
    """Each row's mean as a dot and its 95 % confidence interval as a line, on a shared axis."""
    if not rows:
        return ""
    label_w, value_w, row, top, axis = 250, 150, 22, 4, 20
    plot_w = width - label_w - value_w
    low = min(min(ci.low, ci.mean) for _, ci in rows)
    high = max(max(ci.high, ci.mean) for _, ci in rows)
    if high - low < 1e-9:
        low, high = low - 0.5, high + 0.5
    height = top + row * len(rows) + axis

    def x(value: float) -> float:
        return label_w + plot_w * (value - low) / (high - low)

    parts = [
        f'<svg class="chart intervals" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" role="img" {FONT}>'
    ]
    for index, (label, ci) in enumerate(rows):
        y = top + index * row + row / 2
        text = escape(f"{ci.mean:.3f} [{ci.low:.3f}, {ci.high:.3f}]")
        parts.append(
            f'<text x="{label_w - 8}" y="{y + 4:.1f}" text-anchor="end" class="tick">'
            f"{escape(label)}</text>"
            f'<line x1="{x(ci.low):.1f}" y1="{y:.1f}" x2="{x(ci.high):.1f}" y2="{y:.1f}" '
            'class="whisker"/>'
            f'<circle cx="{x(ci.mean):.1f}" cy="{y:.1f}" r="4" class="dot">'
            f"<title>{escape(label)}: mean {text} (95% CI, n={ci.n:,})</title></circle>"
            f'<text x="{label_w + plot_w + 8}" y="{y + 4:.1f}" class="value">{text}</text>'
        )
    base = top + row * len(rows) + 4
    parts.append(
        f'<line x1="{label_w}" y1="{base}" x2="{label_w + plot_w}" y2="{base}" class="axis"/>'
        f'<text x="{label_w}" y="{base + 14}" class="tick">{_tick(low)}</text>'
        f'<text x="{label_w + plot_w}" y="{base + 14}" text-anchor="end" class="tick">'
        f"{_tick(high)}</text></svg>"
    )
    return "".join(parts)
