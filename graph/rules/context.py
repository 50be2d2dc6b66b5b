"""The verdict in context (issue 13): is the profile representative of the run, where did a
failed or timed-out job stop (a hang or a slow job), and how does the achieved collective bus
bandwidth compare with what the fabric can do. Pure functions over the analysed inputs; the
synthesizer puts their results in the report.
"""

from __future__ import annotations

import gzip
import json
import math
import re
import statistics
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from . import diagnosis as dg
from ...tools.errors import InputError

# ---------------------------------------------------------------------------------------------
# Representativeness
# ---------------------------------------------------------------------------------------------

_BASE_TIME = re.compile(rb'"baseTimeNanoseconds"\s*:\s*(\d+)')


def trace_base_time_s(path: str | Path) -> float | None:
    """Unix time (s) of the trace's time origin: kineto's ``baseTimeNanoseconds`` (event ``ts``
    are µs after it). Streams the file (``.json`` or ``.json.gz``) in 1 MiB chunks, so memory stays
    bounded; None when the key is absent or the file unreadable."""
    p = Path(path)
    try:
        fh = gzip.open(p, "rb") if p.name.endswith(".gz") else p.open("rb")
        with fh:
            tail = b""
            while True:
                chunk = fh.read(1 << 20)
                if not chunk:
                    return None
                m = _BASE_TIME.search(tail + chunk)
                if m:
                    return int(m.group(1)) / 1e9
                tail = chunk[-64:]
    except (OSError, EOFError, ValueError):
        return None


def profiled_window(rank_result: dict[str, Any]) -> tuple[float, float] | None:
    """(start, end) in unix s of the profiled steps of one rank result (its streaming record's
    ``steps`` plus the trace's base time), or None."""
    steps = ((rank_result.get("stream") or {}).get("steps")) or []
    if not steps or not rank_result.get("path"):
        return None
    base = trace_base_time_s(rank_result["path"])
    if base is None:
        return None
    t0 = min(float(s["ts"]) for s in steps)
    t1 = max(float(s["ts"]) + float(s["dur"]) for s in steps)
    return base + t0 / 1e6, base + t1 / 1e6


def _scaled_timeline(timeline: dict[str, Any], ratio: float) -> dict[str, Any]:
    """The timeline re-expressed over the log's step: GPU rows × ``ratio`` (profiled / log step),
    idle what is left. Assumes the profiler added host time only (its kernels run as fast)."""
    out = {}
    for k, v in timeline.items():
        pct = float(v["percent"] if isinstance(v, dict) else v)
        out[k] = {"percent": min(100.0, pct * ratio) if k not in ("idle_time", "total_time") else pct}
    busy = out.get("busy_time", {}).get("percent")
    if busy is not None:
        out["idle_time"] = {"percent": max(0.0, 100.0 - busy)}
    return out


def representativeness(rank_result: dict[str, Any], fom: dict[str, Any] | None,
                       util_series: list[tuple[float, float]] | None,
                       window: tuple[float, float] | None = None) -> dict[str, Any] | None:
    """Compare the profiled steps with the run.

    ``rank_result``: the critical rank's trace result (``step_time_ms``, ``timeline``); ``fom``:
    the log's figures (``steady_step_time_s``); ``util_series``: GPU utilization ``[(unix s, %)]``;
    ``window``: the profiled window in unix s (:func:`profiled_window`). Returns ``{step_ratio,
    trace_step_ms, log_step_ms, step_flag, class_after_correction, busy_pct, util_pct_window,
    util_samples, util_diff_pp, util_flag, representative, statement}`` or None when neither check
    can run. Thresholds: :data:`~.diagnosis.REPR_STEP_RATIO`, :data:`~.diagnosis.REPR_UTIL_PP`."""
    out: dict[str, Any] = {}
    notes: list[str] = []
    t_ms = rank_result.get("step_time_ms")
    log_s = (fom or {}).get("steady_step_time_s")
    tl = rank_result.get("timeline") or {}
    if t_ms and log_s:
        ratio = float(t_ms) / (float(log_s) * 1e3)
        flag = ratio > dg.REPR_STEP_RATIO or ratio < 1.0 / dg.REPR_STEP_RATIO
        out.update(step_ratio=round(ratio, 3), trace_step_ms=round(float(t_ms), 3),
                   log_step_ms=round(float(log_s) * 1e3, 3), step_flag=flag)
        if flag:
            before = dg.classify_trace(rank_result).klass.value
            after = dg.classify_trace({**rank_result, "timeline": _scaled_timeline(tl, ratio)}).klass.value
            out["class_after_correction"] = after
            idle_c = _scaled_timeline(tl, ratio).get("idle_time", {}).get("percent")
            notes.append(f"the profiled steps last {ratio:.2f}× the log's steady step ({float(t_ms):.2f} vs "
                         f"{float(log_s) * 1e3:.2f} ms, threshold {dg.REPR_STEP_RATIO:g}×): the profiler "
                         + ("inflated them (host overhead, e.g. record_shapes)" if ratio > 1 else
                            "caught faster steps than the run's typical one")
                         + (f"; re-expressed over the log's step the GPU is idle {idle_c:.1f}% and the class "
                            + ("holds" if after == before else f"would be {after}") if idle_c is not None else ""))
        else:
            notes.append(f"the profiled steps last {ratio:.2f}× the log's steady step: representative")
    busy = (tl.get("busy_time") or {}).get("percent") if isinstance(tl.get("busy_time"), dict) else tl.get("busy_time")
    if busy is not None and util_series and window:
        # Only samples inside the profiled window: before it a short job may still be starting (real 2-GPU
        # runs 93001/93002: 0% until the profiled steps), and right after it the profiler's trace export
        # stalls the GPU (bundled H200 runs: 0% for ~0.75 s). A window with no sample is not compared.
        lo, hi = window
        vals = [float(v) for t, v in util_series if lo <= float(t) <= hi]
        if vals:
            u = statistics.fmean(vals)
            diff = u - float(busy)
            uflag = abs(diff) > dg.REPR_UTIL_PP
            out.update(busy_pct=round(float(busy), 2), util_pct_window=round(u, 2), util_samples=len(vals),
                       util_diff_pp=round(diff, 2), util_flag=uflag)
            notes.append(f"GPU busy {float(busy):.1f}% in the trace vs utilization {u:.1f}% over the profiled window "
                         f"({len(vals)} sample(s)): " + (f"disagree by more than {dg.REPR_UTIL_PP:g} pp" if uflag else
                                                    f"agree within {dg.REPR_UTIL_PP:g} pp"))
        else:
            out["util_samples"] = 0
            notes.append(f"no utilization sample falls inside the {window[1] - window[0]:.3f} s profiled window: "
                         "busy share and utilization not compared")
    if not out:
        return None
    out["representative"] = not (out.get("step_flag") or out.get("util_flag"))
    out["statement"] = ("Profile representative: " if out["representative"] else "Profile NOT representative: ") \
        + "; ".join(notes) + "."
    return out


# ---------------------------------------------------------------------------------------------
# Progress of failed and timed-out jobs
# ---------------------------------------------------------------------------------------------

_TS = re.compile(r"(\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:\.\d+)?)(Z|[+-]\d{2}:?\d{2})?")


def last_step_timestamp(log: Path, step_pattern: re.Pattern[str]) -> float | None:
    """Unix time of the last line matching ``step_pattern`` that carries an ISO-8601 timestamp
    (``2026-11-30 10:01:02``, UTC unless an offset is given), or None."""
    last = None
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        if step_pattern.search(line):
            m = _TS.search(line)
            if m:
                s = m.group(1).replace(" ", "T")
                tz = m.group(2)
                dt = datetime.fromisoformat(s + ("+00:00" if not tz or tz == "Z" else tz))
                last = dt.astimezone(timezone.utc).timestamp()
    return last


STEP_LINE = re.compile(r"Batch \d+:.*time [0-9.eE+-]+ seconds|tic4-tic1 in [0-9.eE+-]+ seconds|s/it|it/s")


def progress(state: str, start: float | None, end: float | None, step_times_s: list[float],
             planned_steps: int | None = None, util_series: list[tuple[float, float]] | None = None,
             last_step_unix: float | None = None) -> dict[str, Any] | None:
    """Where a job that did not complete stopped, and whether it hung or was slow.

    ``state``: SLURM state; ``start``/``end``: unix s; ``step_times_s``: the logged step times in
    order; ``util_series``: GPU utilization ``[(unix s, %)]``; ``last_step_unix``: the last step's
    log timestamp when the log has them. Without a timestamp the last step is placed at the first
    GPU activity (utilization > :data:`~.diagnosis.UTIL_ACTIVE_PCT`, else the job start) plus the
    sum of the logged step times. A silence of at least ``max(HANG_MIN_GAP_S, HANG_GAP_STEPS ×
    longest step)`` before the end is a hang; less, on a TIMEOUT, a slow job. Returns None for a
    COMPLETED job or one without start/end."""
    st = (state or "UNKNOWN").split()[0].upper()
    if st == "COMPLETED" or start is None or end is None:
        return None
    util = sorted((float(t), float(v)) for t, v in (util_series or []) if start - 1 <= float(t) <= end + 1)
    out: dict[str, Any] = {"state": st, "start": start, "end": end, "steps_logged": len(step_times_s),
                           "planned_steps": planned_steps}
    if not step_times_s:
        out.update(verdict="no-progress", statement=f"The job ended {st} before logging a single step: it never "
                   "reached steady state (lesson 21); read its error output.")
        return out
    if last_step_unix is not None:
        t_last, how = last_step_unix, "the last step line's timestamp"
    else:
        first = next((t for t, v in util if v > dg.UTIL_ACTIVE_PCT), None)
        t0 = first if first is not None else start
        t_last = t0 + sum(step_times_s)
        how = ("first GPU activity + the sum of the logged step times" if first is not None else
               "job start + the sum of the logged step times (a lower bound: start-up time is not counted)")
    gap = end - t_last
    longest = max(step_times_s)
    need = max(dg.HANG_MIN_GAP_S, dg.HANG_GAP_STEPS * longest)
    after = [v for t, v in util if t > t_last + 1.0]
    u_after = statistics.fmean(after) if after else None
    med = statistics.median(step_times_s)
    out.update(last_step_s_into_job=round(t_last - start, 1), how=how, gap_s=round(gap, 1),
               hang_gap_s=round(need, 1), longest_step_s=round(longest, 4), median_step_s=round(med, 4),
               util_after_pct=None if u_after is None else round(u_after, 1))
    ua = ("" if u_after is None else
          f" GPU utilization after it: mean {u_after:.0f}% — " +
          ("the GPU kept spinning without progress (a collective waiting for a peer that never arrives, e.g. "
           "a PMIx/NCCL fence: seed 000, cluster constraints)" if u_after >= 50 else
           "the GPU sat idle (the host stopped issuing work: a deadlock, an I/O wait, a dead DataLoader worker)"
           if u_after <= dg.UTIL_ACTIVE_PCT else "the GPU was partly busy without the log advancing") + ".")
    if gap >= need:
        out["verdict"] = "hang"
        out["statement"] = (f"HUNG: the log's last step ({len(step_times_s)}) came about {t_last - start:.0f} s into "
                            f"the job ({how}), {gap:.0f} s before it ended {st}; that silence is ≥ {need:.0f} s "
                            f"(max of {dg.HANG_MIN_GAP_S:g} s and {dg.HANG_GAP_STEPS:g}× the longest step, "
                            f"{longest:.3g} s).{ua}")
    elif st in ("TIMEOUT", "TIMEOUT_WAITING"):
        rest = (planned_steps - len(step_times_s)) if planned_steps else None
        out["verdict"] = "slow"
        out["statement"] = (f"SLOW, not hung: the log advanced until about {max(gap, 0):.0f} s before the {st} "
                            f"(under the {need:.0f} s hang threshold), at a median {med:.3g} s/step"
                            + (f"; the remaining {rest} of {planned_steps} steps would need about "
                               f"{rest * med:.0f} s more" if rest and rest > 0 else "") + f".{ua}")
    else:
        out["verdict"] = "stopped"
        out["statement"] = (f"STOPPED by a failure ({st}) while still making progress: the last step "
                            f"({len(step_times_s)}) came {max(gap, 0):.0f} s before the end; read the error "
                            f"output.{ua}")
    return out


# ---------------------------------------------------------------------------------------------
# Bus bandwidth in context
# ---------------------------------------------------------------------------------------------

# Per-direction link bandwidth per GPU (GB/s = 1e9 B/s), from the vendors' datasheets: the ceiling
# of an intra-node ring all-reduce busbw (nccl-tests' busbw is defined so that it compares with
# the link speed). NVIDIA H100/H200 SXM: NVLink 4, 900 GB/s total (bidirectional) → 450 GB/s;
# A100 SXM: NVLink 3, 600 GB/s → 300 GB/s; AMD Instinct MI300X: 7 Infinity Fabric links,
# 896 GB/s peak aggregate → 448 GB/s; PCIe Gen5 x16: 64 GB/s per direction.
LINK_DATASHEET: dict[str, tuple[float, str]] = {
    "H200": (450.0, "NVIDIA H200 SXM datasheet: NVLink 900 GB/s bidirectional, 450 GB/s per direction"),
    "H100": (450.0, "NVIDIA H100 SXM datasheet: NVLink 900 GB/s bidirectional, 450 GB/s per direction"),
    "A100": (300.0, "NVIDIA A100 SXM datasheet: NVLink 600 GB/s bidirectional, 300 GB/s per direction"),
    "MI300X": (448.0, "AMD Instinct MI300X datasheet: Infinity Fabric 896 GB/s peak aggregate, 448 GB/s per direction"),
}

_IEC = {"B": 1, "KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30, "KB": 1000, "MB": 10**6, "GB": 10**9}


def _parse_size(s: str) -> float | None:
    m = re.match(r"^\s*([0-9.]+)\s*([KMG]i?B|B)\s*$", s, re.I)
    if not m:
        return None
    return float(m.group(1)) * _IEC[m.group(2).upper()]


def load_baseline(path: str | Path) -> tuple[list[tuple[float, float]], str]:
    """All-reduce busbw measured by ``eval-cluster``: ``([(payload bytes, busbw GB/s)], source)``.

    Reads the raw JSON (``network.intra|inter.rows[{bytes, busbw_gbps}]``; inter-node rows win when
    present, the fabric a multi-node job crosses) or the markdown report's all-reduce table
    (``| payload | time (µs) | algbw (GB/s) | busbw (GB/s) |``). Raises :class:`InputError` when the
    file is unreadable or holds no all-reduce measurement."""
    p = Path(path)
    try:
        text = p.read_text(errors="replace")
    except OSError as e:
        raise InputError(f"--baseline {p}: {e.strerror or e}") from e
    rows: list[tuple[float, float]] = []
    if p.suffix == ".json":
        try:
            d = json.loads(text)
        except ValueError as e:
            raise InputError(f"--baseline {p}: not JSON ({e})") from e
        net = d.get("network") or {}
        for part in ("inter", "intra"):
            rr = [(float(r["bytes"]), float(r["busbw_gbps"])) for r in (net.get(part) or {}).get("rows") or []
                  if r.get("busbw_gbps") is not None and r.get("correct", True)]
            if rr:
                rows = rr
                src = f"{p.name} ({part}-node all-reduce, {(net.get(part) or {}).get('ranks', '?')} ranks)"
                break
    else:
        for line in text.splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if len(cells) == 4:
                size = _parse_size(cells[0])
                try:
                    bw = float(cells[3])
                except ValueError:
                    continue
                if size:
                    rows.append((size, bw))
        src = f"{p.name} (all-reduce table)"
    if not rows:
        raise InputError(f"--baseline {p}: no all-reduce busbw measurement in it (a 1-GPU node skips the benchmark)")
    return sorted(rows), src


def baseline_at(rows: list[tuple[float, float]], nbytes: float) -> tuple[float, float]:
    """(payload, busbw) of the measured payload nearest to ``nbytes`` on a log scale."""
    return min(rows, key=lambda r: abs(math.log(max(r[0], 1.0)) - math.log(max(nbytes, 1.0))))


def busbw_context(groups: list[dict[str, Any]], baseline: str | Path | None, gpu: str | None,
                  nodes: int | None = None) -> tuple[list[dict[str, Any]], list[str]]:
    """Each all-reduce group's achieved busbw against the eval-cluster measurement at the nearest
    message size (``baseline``), else the GPU's datasheet link figure (:data:`LINK_DATASHEET`,
    single-node jobs only). Returns (rows ``{collective, msg_bytes, busbw_gbps, reference_gbps,
    reference, ratio}``, problems)."""
    problems: list[str] = []
    rows_in = [g for g in groups if g.get("collective") == "allreduce" and g.get("busbw_gbps") and g.get("msg_bytes")]
    if not rows_in:
        return [], problems
    ref_rows: list[tuple[float, float]] = []
    src = ""
    if baseline:
        try:
            ref_rows, src = load_baseline(baseline)
        except InputError as e:
            problems.append(str(e))
    sheet = next((v for k, v in LINK_DATASHEET.items() if k in (gpu or "").upper().replace(" ", "")), None)
    out = []
    for g in rows_in:
        mb, bw = float(g["msg_bytes"]), float(g["busbw_gbps"])
        if ref_rows:
            pay, ref = baseline_at(ref_rows, mb)
            how = f"eval-cluster all-reduce at {pay / 2**20:.4g} MiB, {src}"
        elif sheet and (nodes or 1) <= 1:
            ref, how = sheet
        else:
            continue
        out.append({"collective": "allreduce", "msg_bytes": mb, "busbw_gbps": round(bw, 2),
                    "reference_gbps": round(ref, 2), "reference": how, "ratio": round(bw / ref, 3) if ref else None})
    return out, problems
