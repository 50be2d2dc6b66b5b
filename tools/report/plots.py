"""PNG plots for the report: GPU time breakdown, telemetry over the job window, FOM per optimizer
iteration.

Figures are drawn with matplotlib's object API on the Agg canvas (no pyplot global state, no
display needed), so they are safe to call from worker threads of the graph. Every function
returns the path it wrote and raises :class:`InputError` (one line) for empty or malformed input;
the PNG is rendered in memory and published atomically (:mod:`ai4s_graph.state.publish`), so a
failed call never leaves a half-written file behind, and a link at ``path`` is refused.
"""

from __future__ import annotations

import io
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...state.publish import publish
from ..errors import InputError

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: GPU timeline categories in stacking order: TraceLens's gpu_timeline rows
#: (computation_time + exposed_comm_time + exposed_memcpy_time + idle_time = total_time).
BREAKDOWN_CATEGORIES = (
    ("computation_time", "computation", "#4C72B0"),
    ("exposed_comm_time", "exposed comm", "#DD8452"),
    ("exposed_memcpy_time", "exposed memcpy", "#8172B3"),
    ("idle_time", "idle", "#C8C8C8"),
)
DPI = 110

#: The step plot's widest figure (inches: 1760 px at :data:`DPI`, a report page) and most step
#: labels per panel: a presentation choice; a 138-step profile was 72 in (8000 px) wide, and its
#: drawing 2 s of ``run``'s 21 s on the replicated 176 MB trace (cProfile, 2026-12-03).
STEP_PLOT_MAX_IN = 16.0
STEP_PLOT_MAX_TICKS = 40
#: A step's bar width in steps (a presentation choice; ``ax.bar``'s 0.8 narrowed to 0.7 for the gaps).
STEP_BAR_WIDTH = 0.7


_STAGED: ContextVar[list[tuple[Path, bytes]] | None] = ContextVar("ai4s_staged_plots", default=None)


@contextmanager
def staged() -> Iterator[list[tuple[Path, bytes]]]:
    """Within this block the plot functions render into the yielded list of ``(path, PNG bytes)``
    instead of writing, so the caller publishes them with the report in one
    :func:`~ai4s_graph.state.publish.publish_many` (a failed report write then leaves the old
    plots too)."""
    files: list[tuple[Path, bytes]] = []
    token = _STAGED.set(files)
    try:
        yield files
    finally:
        _STAGED.reset(token)


def _figure(**kw: Any) -> Figure:
    """A new figure (keyword arguments: matplotlib's ``Figure``'s) on the Agg canvas. matplotlib is
    imported here, on the first figure, not with this module: its import (~0.5 s and ~40 MiB on the
    project's 2-core machine, 2026-12-03) is then paid by the synthesizer after a run's trace read,
    not held through it."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(**kw)
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Figure, path: str | os.PathLike[str]) -> Path:
    """Render ``fig`` as PNG in memory and publish it at ``path`` atomically, refusing a link
    there (:func:`ai4s_graph.state.publish.publish`), or stage it (:func:`staged`). Returns the path."""
    out = Path(path)
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    keep_png(out, buf.getvalue())
    return out


def keep_png(path: Path, data: bytes) -> None:
    """File the PNG ``data`` of ``path``: staged with the report within :func:`staged`, else
    published at ``path`` atomically (a link there refused: UnsafePathError, OSError)."""
    batch = _STAGED.get()
    if batch is not None:
        batch.append((path, data))
    else:
        publish(path, data)


def _num(v: Any, what: str) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise InputError(f"{what} is not a number: {v!r}") from None
    if not math.isfinite(f):
        raise InputError(f"{what} is not finite: {v!r}")
    return f


def _entry(timeline: Mapping[str, Any], key: str) -> Mapping[str, Any] | None:
    for k in (key, key.removesuffix("_time")):
        if k in timeline:
            return timeline[k]
    return None


def _normalise_timeline(tl: Mapping[str, Any], rank: str) -> dict[str, tuple[float, float]]:
    """``{category: (time_ms, percent)}`` of one rank; percent is derived from the total when
    absent."""
    vals: dict[str, float] = {}
    pcts: dict[str, float | None] = {}
    for key, _, _ in BREAKDOWN_CATEGORIES:
        e = _entry(tl, key)
        if e is None:
            vals[key], pcts[key] = 0.0, None
            continue
        if not isinstance(e, Mapping) or "time_ms" not in e:
            raise InputError(f"rank {rank}: timeline entry {key} needs a 'time_ms' value, got {e!r}")
        vals[key] = _num(e["time_ms"], f"rank {rank} {key}.time_ms")
        if vals[key] < 0:
            raise InputError(f"rank {rank}: {key}.time_ms is negative ({vals[key]})")
        pcts[key] = _num(e["percent"], f"rank {rank} {key}.percent") if e.get("percent") is not None else None
    total_e = _entry(tl, "total_time")
    total = _num(total_e["time_ms"], f"rank {rank} total_time.time_ms") if isinstance(total_e, Mapping) else sum(vals.values())
    if total <= 0:
        raise InputError(f"rank {rank}: GPU timeline has no time (all categories zero)")
    return {k: (vals[k], pcts[k] if pcts[k] is not None else 100.0 * vals[k] / total) for k in vals}


def plot_gpu_breakdown(
    timeline: Mapping[str, Any] | Sequence[Mapping[str, Any]],
    path: str | os.PathLike[str],
    *,
    title: str = "GPU time breakdown",
) -> Path:
    """Stacked bar of computation / exposed communication / exposed memcpy / idle time per rank.

    ``timeline``: one rank's TraceLens-style gpu_timeline, ``{"computation_time": {"time_ms": ms,
    "percent": %}, "exposed_comm_time": ..., "exposed_memcpy_time": ..., "idle_time": ...,
    "total_time": ...}`` (keys may drop the ``_time`` suffix; ``percent`` is derived from
    ``total_time`` or the sum when missing), or a list of them (index = rank), or a mapping
    ``{rank_label: timeline}``. Bars are stacked shares of the rank's GPU time (%, so ranks of
    very different totals stay readable); each segment of 5% or more is labelled with its percent
    and milliseconds, and each bar's total milliseconds is written above it. Returns ``path``. Raises :class:`InputError` for no ranks, a missing
    ``time_ms``, negative or non-finite values, or a rank with no time at all.
    """
    if isinstance(timeline, Mapping) and timeline and all(
        isinstance(v, Mapping) and "time_ms" not in v and any(isinstance(x, Mapping) for x in v.values())
        for v in timeline.values()
    ):
        ranks = [(str(k), v) for k, v in timeline.items()]
    elif isinstance(timeline, Mapping):
        ranks = [("0", timeline)] if timeline else []
    elif isinstance(timeline, Sequence) and not isinstance(timeline, (str, bytes)):
        ranks = [(str(i), tl) for i, tl in enumerate(timeline)]
    else:
        raise InputError(f"GPU timeline must be a mapping or a list of mappings, got {type(timeline).__name__}")
    if not ranks:
        raise InputError("GPU timeline is empty: no rank to plot")
    rows = []
    for label, tl in ranks:
        if not isinstance(tl, Mapping) or not tl:
            raise InputError(f"rank {label}: GPU timeline is empty")
        rows.append((label, _normalise_timeline(tl, label)))

    return _save(gpu_breakdown_figure(rows, title), path)


#: Segments of at least this share of a rank's GPU time get a label (% and ms).
LABEL_MIN_PCT = 5.0
#: Bar width in x units (one rank per unit); a label that does not fit inside its segment goes right of it.
BAR_WIDTH = 0.6


def _boxes_overlap(a: Any, b: Any) -> bool:
    """Two display-space bounding boxes intersect (touching edges do not count)."""
    return a.x0 < b.x1 and b.x0 < a.x1 and a.y0 < b.y1 and b.y0 < a.y1


def gpu_breakdown_figure(rows: Sequence[tuple[str, Mapping[str, tuple[float, float]]]],
                         title: str = "GPU time breakdown") -> Figure:
    """The figure of :func:`plot_gpu_breakdown` for normalised ``rows`` (``[(rank label,
    {category: (ms, percent)})]``). Labels never overlap: each segment label is placed inside its
    segment when its text fits there (measured with the Agg renderer), else right of the bar at
    the segment's height, and the labels right of one bar are pushed apart so that their boxes do not
    intersect (each other, the bar totals above, the tick labels)."""
    fig = _figure(figsize=(max(5.0, 1.4 * len(rows) + 3.0), 4.6))
    ax = fig.add_subplot(1, 1, 1)
    xs = list(range(len(rows)))
    bottoms = [0.0] * len(rows)
    placed: list[tuple[int, Any, Any]] = []  # (bar index, text, its segment's patch)
    for key, name, color in BREAKDOWN_CATEGORIES:
        heights = [r[key][1] for _, r in rows]
        bars = ax.bar(xs, heights, bottom=bottoms, color=color, label=name, width=BAR_WIDTH, edgecolor="white")
        for i, (_, r) in enumerate(rows):
            ms, pct = r[key]
            if pct >= LABEL_MIN_PCT:
                t = ax.text(i, bottoms[i] + pct / 2, f"{pct:.1f}%\n{ms:.3g} ms", ha="center", va="center", fontsize=8)
                placed.append((i, t, bars[i]))
        bottoms = [b + h for b, h in zip(bottoms, heights)]
    totals = []
    for i, (_, r) in enumerate(rows):
        total = sum(v[0] for v in r.values())
        totals.append(ax.text(i, max(bottoms[i], 100.0) + 1.5, f"{total:.4g} ms", ha="center", va="bottom", fontsize=8))
    labels = [f"rank {lab}" if lab.isdigit() else lab for lab, _ in rows]
    rotate = any(len(lab) > 10 for lab in labels)
    ax.set_xticks(xs, labels, rotation=25 if rotate else 0, ha="right" if rotate else "center", fontsize=8)
    ax.set_xlim(-0.5, len(rows) - 0.5 + (BAR_WIDTH / 2 if placed else 0.0))
    ax.set_ylim(0, 112)
    ax.set_ylabel("share of GPU time (%), segment labels: % and ms")
    ax.set_title(title)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    _place_segment_labels(fig, ax, placed)
    return fig


def _place_segment_labels(fig: Figure, ax: Any, placed: list[tuple[int, Any, Any]]) -> None:
    """Move each label whose box does not fit inside its segment (2 px margin) right of its bar, then
    push the outside labels of each bar up, in height order, until no two boxes meet and the lowest
    clears the x axis (2 px gaps)."""
    r = fig.canvas.get_renderer()
    outside: dict[int, list[Any]] = {}
    for i, t, patch in placed:
        tb, pb = t.get_window_extent(r), patch.get_window_extent(r)
        if tb.height + 4 > pb.height or tb.width + 4 > pb.width:
            t.set_x(i + BAR_WIDTH / 2 + 0.04)
            t.set_ha("left")
            outside.setdefault(i, []).append(t)
    inv = ax.transData.inverted()
    for texts in outside.values():
        texts.sort(key=lambda t: t.get_position()[1])
        top = ax.bbox.y0 - 2  # the lowest label stays above the x axis (and its tick labels)
        for t in texts:
            b = t.get_window_extent(r)
            if b.y0 < top + 2:
                x_pix, y_pix = ax.transData.transform(t.get_position())
                t.set_y(inv.transform((x_pix, y_pix + top + 2 - b.y0))[1])
                b = t.get_window_extent(r)
            top = b.y1


STEP_PARTS = (("computation_ms", "computation", "#4C72B0"), ("exposed_comm_ms", "exposed comm", "#DD8452"),
              ("exposed_memcpy_ms", "exposed memcpy", "#8172B3"), ("idle_ms", "idle (host, waits)", "#C8C8C8"))
"""Per-step parts in stacking order (:func:`ai4s_graph.tools.report.steps.step_breakdown`)."""


def plot_step_breakdown(per_rank: Mapping[str, Sequence[Mapping[str, Any]]], path: str | os.PathLike[str], *,
                        marked: str | None = None, title: str = "Step time breakdown") -> Path:
    """Stacked bars per step (ms) of computation / exposed communication / exposed memcpy / idle,
    one panel per rank (the PyTorch profiler TensorBoard step-time view in TraceLens's categories).
    ``per_rank``: ``{rank label: [{"step", "computation_ms", "exposed_comm_ms",
    "exposed_memcpy_ms", "idle_ms"}]}``; ``marked``: the rank to mark (the straggler), its panel
    titled so. Returns ``path``. Raises :class:`InputError` for no rank or no step, or a
    non-numeric or negative part."""
    ranks = [(str(k), list(v)) for k, v in per_rank.items() if v]
    if not ranks:
        raise InputError("step breakdown: no rank with steps to plot")
    n_max = max(len(r) for _, r in ranks)
    heights = {label: _step_heights(label, rows) for label, rows in ranks}  # every value checked before drawing
    from matplotlib.collections import PolyCollection
    from matplotlib.patches import Patch

    fig = _figure(figsize=(min(STEP_PLOT_MAX_IN, max(6.0, 0.5 * n_max + 3.5)), 2.8 * len(ranks) + 0.6))
    every = max(1, math.ceil(n_max / STEP_PLOT_MAX_TICKS))  # a label every k-th step past the cap
    first = None
    half = STEP_BAR_WIDTH / 2
    for j, (label, rows) in enumerate(ranks):
        ax = fig.add_subplot(len(ranks), 1, j + 1, sharey=first)  # one ms scale: ranks compare at a glance
        first = first or ax
        xs = list(range(len(rows)))
        edge = "white" if len(rows) <= STEP_PLOT_MAX_TICKS else "none"
        bottoms = [0.0] * len(rows)
        for (key, name, color), h in zip(STEP_PARTS, heights[label]):
            # one collection of the part's bars (a Rectangle artist per bar, as ``ax.bar`` makes, took
            # ~1 s to draw for 138 steps x 4 parts: measured on the project's machine, 2026-12-07)
            bars = PolyCollection([((x - half, b), (x + half, b), (x + half, b + v), (x - half, b + v))
                                   for x, b, v in zip(xs, bottoms, h)],
                                  facecolors=color, edgecolors=edge, label=name)
            bars.sticky_edges.y.append(0.0)  # the ms axis starts at 0, as bars' own limits do
            ax.add_collection(bars, autolim=True)
            bottoms = [b + x for b, x in zip(bottoms, h)]
        ax.autoscale_view()
        step_panel_labels(ax, label, rows, every, marked)
        if j == 0:
            ax.legend(handles=[Patch(facecolor=color, edgecolor=edge, label=name) for _, name, color in STEP_PARTS],
                      loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    fig.axes[-1].set_xlabel("ProfilerStep")
    fig.suptitle(title)
    fig.tight_layout()  # a rank's panel title clear of the tick labels above it
    return _save(fig, path)


def step_panel_labels(ax: Any, label: str, rows: Sequence[Mapping[str, Any]], every: int, marked: str | None) -> None:
    """The step plot's panel of rank ``label``: a tick every ``every``-th step (its number), the ms
    axis, the title (the straggler's, ``marked``, in red)."""
    xs = list(range(len(rows)))
    ax.set_xticks(xs[::every], [str(r.get("step")) for r in rows][::every], fontsize=8)
    ax.set_ylabel("ms")
    lab = f"rank {label}" if label.isdigit() else label
    ax.set_title(lab + (" — straggler (the other ranks wait for it)" if marked is not None and label == str(marked)
                        else ""), fontsize=9, color="#B22222" if label == str(marked) else "black")


def _step_heights(label: str, rows: Sequence[Mapping[str, Any]]) -> list[list[float]]:
    """Per part of :data:`STEP_PARTS`, the bar heights (ms) of ``rows``. Raises :class:`InputError`
    for a non-numeric or negative part."""
    out = []
    for key, _, _ in STEP_PARTS:
        h = []
        for r in rows:
            v = _num(r.get(key), f"rank {label} step {r.get('step')}: {key}")
            if v < 0:
                raise InputError(f"rank {label} step {r.get('step')}: {key} is negative: {v}")
            h.append(v)
        out.append(h)
    return out


def _unix_s(t: float) -> float:
    """Unix seconds; millisecond timestamps (VictoriaMetrics export, > 1e11) are converted."""
    return t / 1000.0 if t > 1e11 else t


#: The profiled window's band is drawn at least this share of the telemetry axis wide (a 0.07 s window
#: on a 45 s job would be 1 px of 550): a presentation choice, the label gives its true length.
MIN_BAND_FRAC = 0.01


def profiled_band(p0: float, p1: float, span: float) -> tuple[float, float, bool]:
    """``(left, right, true_width)`` of the band drawn for the profiled window ``[p0, p1]`` (s since
    the job start) on an axis ``span`` s long: the window itself when it is at least
    :data:`MIN_BAND_FRAC` of the span, else that width centred on the window (kept inside
    ``[0, span]``), ``true_width`` False."""
    w = MIN_BAND_FRAC * span
    if p1 - p0 >= w:
        return p0, p1, True
    c = min(max((p0 + p1) / 2, w / 2), span - w / 2)
    return c - w / 2, c + w / 2, False


def plot_telemetry(
    series: Mapping[str, Sequence[tuple[float, float]] | Mapping[str, Sequence[tuple[float, float]]]],
    units: Mapping[str, str],
    window: tuple[float, float] | None,
    path: str | os.PathLike[str],
    *,
    title: str | None = None,
    profiled: tuple[float, float] | None = None,
    limits: Mapping[str, tuple[float, str]] | None = None,
) -> Path:
    """:func:`telemetry_figure` written at ``path`` (atomically, or staged); returns ``path``. Raises
    :class:`InputError` as :func:`telemetry_figure` does."""
    return _save(telemetry_figure(series, units, window, title=title, profiled=profiled, limits=limits), path)


def telemetry_figure(
    series: Mapping[str, Sequence[tuple[float, float]] | Mapping[str, Sequence[tuple[float, float]]]],
    units: Mapping[str, str],
    window: tuple[float, float] | None,
    *,
    title: str | None = None,
    profiled: tuple[float, float] | None = None,
    limits: Mapping[str, tuple[float, str]] | None = None,
) -> Figure:
    """One panel per metric over the job window, time in seconds since the job start, one line per
    series; ``profiled``: the profiled steps' ``(start, end)`` in unix s, shaded on every panel;
    ``limits``: ``{metric: (value, label)}``, a dashed line on that metric's panel (the board's
    power limit, boost clock: the datasheet's). A profiled window narrower than :data:`MIN_BAND_FRAC`
    of the axis is drawn that wide (:func:`profiled_band`) and its true length and start are written
    on the top panel.

    ``series``: ``{metric: [(t_unix, value), ...]}`` or ``{metric: {series label: [(t_unix,
    value), ...]}}`` (per host and GPU: every point drawn, with a marker when there are few), t in
    unix seconds (values above 1e11 are taken as milliseconds, the VictoriaMetrics export's unit).
    ``units``: ``{metric: unit}`` (``%``, ``W``, ``MHz``, ``MiB``; missing -> no unit).
    ``window``: ``(start, end)`` unix seconds of the job (manifest / ``rmsjob_info``); samples
    outside it are dropped. ``None`` spans the samples. Non-finite samples are dropped. Returns
    the figure (Agg canvas). Raises :class:`InputError` when ``series`` is empty, a metric has no samples, a
    metric has no samples inside the window, or the window is reversed.
    """
    if not series:
        raise InputError("telemetry series is empty: nothing to plot")
    nested = {m: (dict(v) if isinstance(v, Mapping) else {"": v}) for m, v in series.items()}
    if window is not None:
        start, end = _unix_s(_num(window[0], "window start")), _unix_s(_num(window[1], "window end"))
        if end <= start:
            raise InputError(f"telemetry window end {end} is not after its start {start}")
    else:
        ts = [_unix_s(float(t)) for per in nested.values() for pts in per.values() for t, _ in pts]
        if not ts:
            raise InputError("telemetry series hold no samples")
        start, end = min(ts), max(ts)
    panels = []
    for metric, per in nested.items():
        lines = []
        for label, pts in per.items():
            if not pts:
                continue
            xy = []
            for t, v in pts:
                tu = _unix_s(_num(t, f"{metric} timestamp"))
                try:
                    fv = float(v)
                except (TypeError, ValueError):
                    raise InputError(f"{metric}: value is not a number: {v!r}") from None
                if math.isfinite(fv) and start <= tu <= end:
                    xy.append((tu - start, fv))
            if xy:
                lines.append((label, sorted(xy)))
        if not any(per.values()):
            raise InputError(f"telemetry series {metric} is empty")
        if not lines:
            raise InputError(f"telemetry series {metric} has no finite sample inside the job window [{start:.0f}, {end:.0f}]")
        panels.append((metric, lines))

    n = len(panels)
    fig = _figure(figsize=(8.0, max(2.0, 1.9 * n + 0.6)))
    axes = fig.subplots(n, 1, sharex=True, squeeze=False)[:, 0]
    for ax, (metric, lines) in zip(axes, panels):
        for label, xy in lines:
            ax.plot([x for x, _ in xy], [y for _, y in xy], lw=1.0, marker="." if len(xy) <= 200 else None, ms=3,
                    label=label or None)
        unit = units.get(metric, "")
        ax.set_ylabel(f"{unit}" if unit else "value", fontsize=8)
        ax.set_title(metric, fontsize=9, loc="left")
        ax.grid(alpha=0.3)
        if limits and metric in limits:
            val, text = limits[metric]
            ax.axhline(val, color="#B22222", lw=1.0, ls="--", label=text)
        if profiled is not None:
            band = profiled_band(_unix_s(profiled[0]) - start, _unix_s(profiled[1]) - start, end - start)
            ax.axvspan(band[0], band[1], color="#F2C14E", alpha=0.35 if band[2] else 0.8, lw=0,
                       label="profiled steps" if band[2] else f"profiled steps (drawn {MIN_BAND_FRAC:.0%} of the axis wide)")
        ax.set_xlim(0, end - start)
        if any(label for label, _ in lines) or (limits and metric in limits):
            ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, frameon=False)
    if profiled is not None:  # the window's own length and place, written on the top panel
        p0, p1 = _unix_s(profiled[0]) - start, _unix_s(profiled[1]) - start
        b0, b1, _ = profiled_band(p0, p1, end - start)
        right = b1 < 0.6 * (end - start)
        axes[0].text(b1 if right else b0, 0.96, f" profiled steps: {p1 - p0:.3g} s at {p0:.1f} s ",
                     transform=axes[0].get_xaxis_transform(), ha="left" if right else "right", va="top", fontsize=7,
                     color="#8A6100", bbox={"boxstyle": "square,pad=0.15", "fc": "white", "ec": "none", "alpha": 0.8})
    axes[-1].set_xlabel("time since job start (s)" + ("; shaded: the profiled steps" if profiled else ""))
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


_DECISION_STYLE = {
    "baseline": ("#4C72B0", "s", "baseline"),
    "accepted": ("#2CA02C", "o", "accepted"),
    "reverted": ("#D62728", "v", "reverted"),
    "failed": ("#7F7F7F", "x", "failed / no FOM"),
    "other": ("#FF7F0E", "D", "other"),
}
_DECISION_ALIASES = {
    "baseline": "baseline",
    "accept": "accepted",
    "accepted": "accepted",
    "keep": "accepted",
    "revert": "reverted",
    "reverted": "reverted",
    "reject": "reverted",
    "rejected": "reverted",
    "fail": "failed",
    "failed": "failed",
    "blocked": "failed",
    "error": "failed",
}


def plot_fom_iterations(
    records: Sequence[Mapping[str, Any]],
    fom_name: str,
    path: str | os.PathLike[str],
    *,
    higher_is_better: bool | None = None,
) -> Path:
    """FOM per optimizer-loop iteration with each lever's accept/revert decision marked.

    ``records``: ``[{"iteration": int, "lever": str, "fom": float | None, "decision": str}, ...]``;
    decisions ``baseline``, ``accepted``/``accept``, ``reverted``/``revert``/``rejected``,
    ``failed``/``blocked`` (others are drawn as "other"); a record with no FOM (failed run) is
    drawn as a grey x on the axis floor. ``fom_name`` labels the y axis (``epoch_time_s``,
    ``throughput_samples_per_s``). With ``higher_is_better`` set, a dashed line shows the best
    FOM so far among baseline and accepted iterations. Returns ``path``. Raises
    :class:`InputError` when ``records`` is empty, a record lacks ``iteration``, or no record has
    a finite FOM.
    """
    if not records:
        raise InputError("no optimizer iterations to plot")
    pts = []
    for i, r in enumerate(records):
        if not isinstance(r, Mapping) or "iteration" not in r:
            raise InputError(f"iteration record {i} has no 'iteration' key")
        it = int(_num(r["iteration"], f"record {i} iteration"))
        fom = r.get("fom")
        f = float(fom) if fom is not None else math.nan
        dec = _DECISION_ALIASES.get(str(r.get("decision", "")).strip().lower(), "other")
        if not math.isfinite(f):
            dec = "failed"
        pts.append((it, str(r.get("lever", "") or ""), f, dec))
    finite = [p[2] for p in pts if math.isfinite(p[2])]
    if not finite:
        raise InputError("no optimizer iteration has a finite FOM to plot")
    pts.sort(key=lambda p: p[0])
    lo, hi = min(finite), max(finite)
    pad = (hi - lo) * 0.1 or abs(hi) * 0.05 or 1.0
    floor = lo - pad

    fig = _figure(figsize=(max(6.0, 0.6 * len(pts) + 3.0), 4.2))
    ax = fig.add_subplot(1, 1, 1)
    done = [p for p in pts if math.isfinite(p[2])]
    ax.plot([p[0] for p in done], [p[2] for p in done], color="#BBBBBB", lw=1, zorder=1)
    seen = set()
    for it, lever, f, dec in pts:
        color, marker, label = _DECISION_STYLE[dec]
        y = f if math.isfinite(f) else floor
        ax.scatter([it], [y], color=color, marker=marker, s=60, zorder=3,
                   label=label if dec not in seen else None)
        seen.add(dec)
        if lever:
            ax.annotate(lever, (it, y), textcoords="offset points", xytext=(0, 8), ha="center",
                        fontsize=7, rotation=30)
    if higher_is_better is not None:
        best: list[float] = []
        cur = math.nan
        xs = []
        for it, _, f, dec in pts:
            if dec in ("baseline", "accepted") and math.isfinite(f):
                cur = f if not math.isfinite(cur) else (max(cur, f) if higher_is_better else min(cur, f))
            if math.isfinite(cur):
                xs.append(it)
                best.append(cur)
        if xs:
            ax.step(xs, best, where="post", ls="--", color="#2CA02C", lw=1, label="best so far", zorder=2)
    ax.set_xlabel("iteration")
    ax.set_ylabel(fom_name)
    ax.set_ylim(floor - pad * 0.5, hi + pad * 2)
    ax.set_xticks(sorted({p[0] for p in pts}))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    ax.set_title(f"{fom_name} per optimizer iteration")
    return _save(fig, path)
