"""The report's pictures can be read (issue 27, a new user's read): no label of ``gpu_time_breakdown.png``
overlaps another (text boxes measured with matplotlib's Agg renderer), and the profiled window is a
visible, labelled band on a telemetry axis many times longer than the window."""

from __future__ import annotations

import itertools

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.patches import Polygon, Rectangle

from ai4s_graph.tools.report import plots


def _rows(*ranks: tuple[float, float, float, float]) -> list[tuple[str, dict[str, tuple[float, float]]]]:
    """Ranks as (computation, exposed comm, exposed memcpy, idle) ms; percents of their sum."""
    out = []
    for i, parts in enumerate(ranks):
        tot = sum(parts)
        out.append((str(i), {k: (v, 100.0 * v / tot) for (k, _, _), v in zip(plots.BREAKDOWN_CATEGORIES, parts)}))
    return out


def _texts(fig):
    """Every visible non-empty text of the figure with its display box."""
    fig.canvas.draw()  # lays out the legend and the tick labels
    r = fig.canvas.get_renderer()
    ax = fig.axes[0]
    texts = list(ax.texts) + list(ax.get_xticklabels()) + list(ax.get_yticklabels()) + \
        [ax.title, ax.yaxis.label] + list(ax.get_legend().get_texts())
    return [(t, t.get_window_extent(r)) for t in texts if t.get_visible() and t.get_text().strip()]


CASES = {
    # bundled 92001: computing 3.93 ms, idle 69.30 of 73.28 ms (the claims tl.r0.computation_time / idle_time):
    # the 5.4% segment's two-line label does not fit inside it
    "92001": _rows((3.93, 0.0, 0.05, 69.30)),
    # bundled 93004's two ranks, rounded: computing 92.2 / 94.1%, small comm, memcpy and idle slices
    "93004": _rows((621.0, 20.2, 10.8, 21.3), (635.0, 0.0, 16.0, 24.3)),
    # three thin labelled slices on one bar: each 6%, stacked labels must be pushed apart
    "thin": _rows((6.0, 6.0, 6.0, 82.0)),
    # eight ranks of mixed shapes
    "eight": _rows(*[(5.0 + 10 * i, 6.0, 5.5, 100.0 - 16.5 - 10 * i) for i in range(8)]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_no_two_labels_of_the_gpu_breakdown_overlap(case):
    fig = plots.gpu_breakdown_figure(CASES[case])
    boxes = _texts(fig)
    assert len(boxes) >= 5
    for (ta, a), (tb, b) in itertools.combinations(boxes, 2):
        assert not plots._boxes_overlap(a, b), (case, ta.get_text(), tb.get_text())
    ax = fig.axes[0]
    r = fig.canvas.get_renderer()
    bars = [p for p in ax.patches if isinstance(p, Rectangle)]
    for t in ax.texts:
        b = t.get_window_extent(r)
        if t.get_ha() == "center" and "%" in t.get_text():  # inside its segment: fully within one bar patch
            assert any(p.get_window_extent(r).x0 <= b.x0 and b.x1 <= p.get_window_extent(r).x1 and
                       p.get_window_extent(r).y0 <= b.y0 and b.y1 <= p.get_window_extent(r).y1 for p in bars), \
                (case, t.get_text())
        assert b.y0 >= ax.bbox.y0 - 0.5 or "ms" not in t.get_text() or "%" not in t.get_text(), (case, t.get_text())


def test_the_92001_computing_label_moves_out_of_its_thin_segment():
    fig = plots.gpu_breakdown_figure(CASES["92001"])
    (t,) = [t for t in fig.axes[0].texts if t.get_text().startswith("5.4%")]
    assert t.get_ha() == "left" and t.get_position()[0] > plots.BAR_WIDTH / 2
    assert t.get_window_extent(fig.canvas.get_renderer()).y0 >= fig.axes[0].bbox.y0  # clear of the x axis
    (idle,) = [t for t in fig.axes[0].texts if t.get_text().startswith("94.6%")]
    assert idle.get_ha() == "center"  # a label that fits stays inside


def test_overlap_check_by_hand():
    from matplotlib.transforms import Bbox

    assert plots._boxes_overlap(Bbox([[0, 0], [10, 10]]), Bbox([[5, 5], [15, 15]]))
    assert not plots._boxes_overlap(Bbox([[0, 0], [10, 10]]), Bbox([[10, 0], [20, 10]]))  # touching edges


@pytest.mark.parametrize("p0, p1, span, want", [
    (12.80, 12.874, 45.0, (12.837 - 0.225, 12.837 + 0.225, False)),  # 92001: 0.074 s on 45 s -> 0.45 s wide
    (10.0, 20.0, 45.0, (10.0, 20.0, True)),                            # wide enough: drawn as it is
    (0.0, 0.07, 45.0, (0.0, 0.45, False)),                             # at the start: kept inside the axis
    (44.95, 45.0, 45.0, (44.55, 45.0, False)),                         # at the end
])
def test_profiled_band_by_hand(p0, p1, span, want):
    got = plots.profiled_band(p0, p1, span)
    assert got[:2] == pytest.approx(want[:2]) and got[2] is want[2]


def test_a_short_profiled_window_is_a_visible_labelled_band():
    t0 = 1_700_000_000.0
    series = {"gpu_util": {"vm gpu 0": [(t0 + i * 0.25, 10.0 + i % 5) for i in range(180)]},
              "power": {"vm gpu 0": [(t0 + i * 0.25, 120.0) for i in range(180)]}}
    fig = plots.telemetry_figure(series, {"gpu_util": "%", "power": "W"}, (t0, t0 + 45.0),
                                 profiled=(t0 + 12.80, t0 + 12.874))
    FigureCanvasAgg(fig)
    r = fig.canvas.get_renderer()
    for ax in fig.axes:
        (band,) = [p for p in ax.patches if isinstance(p, (Polygon, Rectangle)) and p.get_label().startswith("profiled")]
        w = band.get_window_extent(r).width
        assert w >= plots.MIN_BAND_FRAC * ax.bbox.width - 0.5 and w >= 4.0  # pixels: visible
    (label,) = [t for t in fig.axes[0].texts if "profiled steps" in t.get_text()]
    assert "0.074 s at 12.8 s" in label.get_text()
    lb = label.get_window_extent(r)
    assert fig.axes[0].bbox.x0 <= lb.x0 and lb.x1 <= fig.axes[0].bbox.x1  # inside its panel
