"""SVG drawings of the dashboard: a job's fragment graph and the epoch timeline.

Both are plain SVG elements laid out here (boxes in layers, one bar per epoch); the browser
draws them, no script runs. Every element carries a <title>, so hovering shows the exact value.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from piestream.plan.fragment import Fragment
from piestream.plan.node import StreamNode
from piestream.server.dashboard.model import EpochPoint

BOX_W = 400
LINE_H = 16
GAP_X = 40
GAP_Y = 56
CHARS = 50  # characters of an operator line shown in a box (the full text is in its title)


def _operators(node: StreamNode, depth: int = 0) -> list[tuple[int, str]]:
    out = [(depth, node.explain())]
    for c in node.children():
        out += _operators(c, depth + 1)
    return out


def _layers(ids: list[int], edges: Sequence[tuple[int, int]]) -> dict[int, int]:
    """Longest-path layering: a fragment sits one layer below its deepest upstream."""
    layer = {i: 0 for i in ids}
    for _ in ids:  # at most len(ids) rounds for a DAG
        changed = False
        for up, down in edges:
            if up in layer and down in layer and layer[down] < layer[up] + 1:
                layer[down] = layer[up] + 1
                changed = True
        if not changed:
            break
    return layer


def fragment_graph(
    fragments: Sequence[Fragment],
    upstream: Sequence[Fragment],
    edges: Sequence[tuple[int, int]],
    table_names: dict[int, str],
) -> str:
    """The fragments as boxes (operators, parallelism, state tables), upstream above downstream."""
    everything = [*upstream, *fragments]
    own = {f.fragment_id for f in fragments}
    layer = _layers([f.fragment_id for f in everything], edges)
    rows: dict[int, list[Fragment]] = {}
    for f in sorted(everything, key=lambda f: f.fragment_id):
        rows.setdefault(layer[f.fragment_id], []).append(f)
    lines = {f.fragment_id: _operators(f.root) for f in everything}
    tables = {
        f.fragment_id: [
            table_names.get(t.table_id, t.name or str(t.table_id)) for n in f.root.walk() for t in n.tables()
        ]
        for f in everything
    }
    height = {fid: (2 + len(ops) + (1 if tables[fid] else 0)) * LINE_H + 10 for fid, ops in lines.items()}
    pos: dict[int, tuple[int, int]] = {}
    y = 10
    for r in sorted(rows):
        x = 10
        for f in rows[r]:
            pos[f.fragment_id] = (x, y)
            x += BOX_W + GAP_X
        y += max(height[f.fragment_id] for f in rows[r]) + GAP_Y
    width = max(x + BOX_W for x, _ in pos.values()) + 10
    total_h = y
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="fragment-graph" width="{width}" height="{total_h}" '
        f'viewBox="0 0 {width} {total_h}" font-family="monospace" font-size="12">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="8" markerHeight="8" '
        'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#555"/></marker></defs>',
    ]
    for up, down in edges:
        if up not in pos or down not in pos:
            continue
        ux, uy = pos[up]
        dx, dy = pos[down]
        parts.append(
            f'<line class="edge" x1="{ux + BOX_W // 2}" y1="{uy + height[up]}" x2="{dx + BOX_W // 2}" '
            f'y2="{dy}" stroke="#555" marker-end="url(#arrow)">'
            f"<title>fragment {up} → fragment {down}</title></line>"
        )
    for f in everything:
        fid = f.fragment_id
        x, y0 = pos[fid]
        fill = "#eef4ff" if fid in own else "#f4f4f4"
        parts.append(f'<g class="fragment" id="fragment-{fid}">')
        parts.append(
            f'<rect x="{x}" y="{y0}" width="{BOX_W}" height="{height[fid]}" rx="6" fill="{fill}" '
            'stroke="#335">'
            f"<title>fragment {fid} (job {f.job_id})</title></rect>"
        )
        ty = y0 + LINE_H
        head = f"Fragment {fid} · parallelism {f.parallelism}" + ("" if fid in own else " · upstream job")
        parts.append(f'<text x="{x + 8}" y="{ty}" font-weight="bold">{escape(head)}</text>')
        for depth, text in lines[fid]:
            ty += LINE_H
            shown = ("  " * depth + text)[:CHARS] + ("…" if len("  " * depth + text) > CHARS else "")
            parts.append(
                f'<text class="operator" x="{x + 8}" y="{ty}" xml:space="preserve">{escape(shown)}'
                f"<title>{escape(text)}</title></text>"
            )
        if tables[fid]:
            ty += LINE_H
            state = "state: " + ", ".join(tables[fid])
            parts.append(
                f'<text x="{x + 8}" y="{ty}" fill="#555">{escape(state[:CHARS])}'
                f"<title>{escape(state)}</title></text>"
            )
        parts.append("</g>")
    parts.append("</svg>")
    return "".join(parts)


def epoch_timeline(points: Sequence[EpochPoint], failures: Sequence[EpochPoint], width: int = 720) -> str:
    """Two bar rows over the recent epochs: seconds per epoch (latency) and rows taken in; a red
    tick per failed attempt."""
    if not points and not failures:
        return '<p class="empty">no epochs yet</p>'
    chart_h, pad = 70, 22
    n = max(1, len(points))
    bar = max(1.0, (width - 2 * pad) / n)
    max_s = max((p.seconds for p in points), default=0.0) or 1.0
    max_r = max((p.rows for p in points), default=0.0) or 1.0
    h = 2 * chart_h + 3 * pad
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="epoch-timeline" width="{width}" height="{h}" '
        f'font-family="sans-serif" font-size="11">',
        f'<text x="{pad}" y="14">seconds per epoch (max {max_s:.3f})</text>',
        f'<text x="{pad}" y="{chart_h + pad + 14}">rows in per epoch (max {max_r:,.0f})</text>',
    ]
    w = max(bar - 1, 1)
    for i, p in enumerate(points):
        x = pad + i * bar
        hs = p.seconds / max_s * (chart_h - 4)
        hr = p.rows / max_r * (chart_h - 4)
        parts.append(
            f'<rect class="latency" x="{x:.1f}" y="{pad + chart_h - hs:.1f}" width="{w:.1f}" '
            f'height="{hs:.1f}" fill="#4a7bd0"><title>epoch {p.epoch}: {p.seconds:.3f} s</title></rect>'
        )
        parts.append(
            f'<rect class="rows" x="{x:.1f}" y="{2 * pad + 2 * chart_h - hr:.1f}" width="{w:.1f}" '
            f'height="{hr:.1f}" fill="#5aa469"><title>epoch {p.epoch}: {p.rows:,.0f} rows</title></rect>'
        )
    first = points[0].epoch if points else 0
    for k, f in enumerate(failures):
        # failed attempts: placed at their epoch's slot when it is shown, else at the right edge
        idx = next((i for i, p in enumerate(points) if p.epoch >= f.epoch), n - 1) if f.epoch >= first else 0
        x = pad + idx * bar
        parts.append(
            f'<rect class="failure" x="{x:.1f}" y="{pad - 6 + (k % 3) * 2}" width="3" height="{chart_h}" '
            f'fill="#d04a4a"><title>epoch {f.epoch} failed: {escape(f.error)}</title></rect>'
        )
    parts.append("</svg>")
    return "".join(parts)
