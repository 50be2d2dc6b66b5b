#!/usr/bin/env python3
"""Bundle the runs a device call returned into the accuracy benchmark (run here, not on the device;
needs this package for the trace engine):

    python3 bench/accuracy/bundle.py RUNS_DIR [--only 93111,93112] [--dest bench/accuracy/cases]
    python3 bench/accuracy/bundle.py - --table      # the README's table of the bundled cases

``RUNS_DIR`` holds ``<jobid>/`` directories as ``generate.py`` packs them (``tar xzf runs-1gpu.tar.gz``
gives ``runs/``). For every case of :mod:`cases` that goes into the benchmark (``bench``) and whose run is
there, ``DEST/<name>/`` gets:

- ``manifest.json``, ``train.log``, ``run_info.json``, ``cmd.txt``, ``telemetry/`` as returned;
- ``truth.json``: the truth of ``cases.py`` (cause, class, lever, control, notes, and for controls
  ``control_of`` and ``present``) with the run's ``jobid``, ``name``, ``gpus``, ``env``, the workload's
  ``sites``, and ``measured``: the figures the class and the effect were judged on (:func:`measure`,
  read from the run as returned, before any trimming), with the step ratio against the control when
  the control's run is there too;
- ``traces/``: the traces, rank 0's trimmed to the profiled steps of :data:`TRIM` when the case is
  listed there (:func:`trim_trace`); every other trace as returned.

Trimming keeps whole profiled steps (never part of one): every event that lies wholly inside a removed
``ProfilerStep#N`` window goes, GPU events that overlap a kept step stay with their launch calls and
flows, events outside every step stay. It writes what it removed into the trace itself (top-level key
``ai4s_trim``) and checks that the step accounting (``trace steps``) and the engine's per-step row of
every kept step are the same as on the whole trace; a difference is an error and nothing is written.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import shutil
import statistics
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import cases as C  # type: ignore  # noqa: E402

TRIM: dict[str, tuple[list[int], str]] = {
    "93121": ([7], "4.5 MB of gzip for 3 steps of ~16 400 kernels each; step 7 (305.7 ms) is the median of "
                   "the three (321.1, 293.3, 305.7 ms)"),
    "93123": ([5], "2.5 MB for 3 steps of ~6 100 syncs each; step 5 (239.0 ms) is the median of 239.0, 245.0, "
                   "228.0 ms"),
    "93204": ([5], "2.4 MB for 3 steps with stacks and shapes; step 5 (224.5 ms) is the median of 224.5, 227.7, "
                   "183.8 ms"),
    "93107": ([6], "2.5 MB for 3 recompiling steps; step 6 (2064.4 ms) is the median of 2250.7, 2021.5, "
                   "2064.4 ms"),
    "93135": ([5, 7], "1.3 MB for 3 steps with stacks, shapes and memory events; steps 5 and 7 (69.9, 73.4 ms) "
                      "hold the median and keep a step-to-step spread"),
    "93122": ([5, 6], "1.1 MB for 3 steps of ~24 700 host ops each; steps 5 and 6 (106.9, 108.0 ms) hold the "
                      "median"),
}
"""Jobid -> (the ProfilerStep numbers kept in rank 0's trace, why). The cases over ~1 MB; the
profiled steps of each are alike (their durations are given), so the kept median step carries the
per-step figures; the spread over three steps is then in the log only. Cases not listed ship whole."""

FILES = ("manifest.json", "train.log", "run_info.json", "cmd.txt")
TRUTH_KEYS = ("cause", "class", "rank", "lever", "control", "notes", "control_of", "present", "score_cause")


# ------------------------------------------------------------------------------------------------ measure
def log_steps(train_log: Path) -> list[float]:
    """Seconds of every ``Batch N: ... time T seconds`` line of a batch-format log, in run order
    (the global step index is the position: epochs restart ``N``). Empty when there are none."""
    out = []
    for ln in train_log.read_text(errors="replace").splitlines():
        if ln.startswith("Batch ") and " time " in ln:
            out.append(float(ln.split(" time ", 1)[1].split()[0]))
    return out


def _trace_steps(path: Path) -> list[tuple[int, float, float]]:
    """(step number, ts µs, dur µs) of each CPU-side ``ProfilerStep#N`` of a trace, by step."""
    ev = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    seen = {}
    for e in ev:
        nm = str(e.get("name", ""))
        if nm.startswith("ProfilerStep#") and e.get("cat") in ("user_annotation", "cpu_op") and "dur" in e:
            seen[int(nm.split("#", 1)[1])] = (float(e["ts"]), float(e["dur"]))
    return [(k, *seen[k]) for k in sorted(seen)]


def measure(run: Path) -> dict[str, Any]:
    """The figures a run's class and effect are judged on (ms unless named): from ``train.log`` the
    steady steps (all but the first: ``log_median_ms``, ``log_mean_ms``, ``log_max_ms``) and the
    unprofiled steady steps (also without the profiler's warm-up, active and export steps, which
    the profiler slows: ``unprofiled_median_ms``); from rank 0's trace (the engine and the step
    accounting) the profiled step (``profiled_median_ms``, ``stretch`` = that / the unprofiled
    median), GPU computation and busy time per step, the window's computing / idle / exposed memcpy
    percent, mean kernel µs, the GEMM + CONV_fwd/bwd share of kernel time, the DataLoader's host time per
    step, the largest idle attribution; and the computing and idle shares of the unprofiled step
    (GPU time per profiled step over the unprofiled step: what the class is judged on when the
    profiler stretched the step, issue 24 point 2). Raises InputError on an unreadable trace."""
    from ai4s_graph.tools.trace import engine
    from ai4s_graph.tools.trace.host_timeline import step_breakdown

    trace = run / "traces" / "trace_rank0.json.gz"
    dts = log_steps(run / "train.log")
    nums = [s for s, _, _ in _trace_steps(trace)]
    skip = set(range(min(nums) - 1, max(nums) + 2)) if nums else set()
    steady = dts[1:]
    unprof = [t for i, t in enumerate(dts) if i > 0 and i not in skip]
    a = engine.analyze(trace).model_dump()
    b = step_breakdown(trace).model_dump()
    tl = {k: round(v["percent"], 1) for k, v in a["timeline"].items() if isinstance(v, dict) and "percent" in v}
    comp = (b["mean_gpu"].get("computation_us") or 0.0) / 1000
    busy = (b["mean_gpu"].get("busy_us") or 0.0) / 1000
    prof = (b.get("distribution") or {}).get("median_ms")
    um = statistics.median(unprof) * 1000 if unprof else None
    gemm = sum(r["percent"] for r in a["ops_by_category"] if r["category"] == "GEMM" or r["category"].startswith("CONV"))
    lead = b.get("lead") or {}
    r3 = lambda v: None if v is None else round(v, 3)  # noqa: E731
    return {
        "log_steps": len(dts), "log_median_ms": r3(statistics.median(steady) * 1000) if steady else None,
        "log_mean_ms": r3(statistics.fmean(steady) * 1000) if steady else None,
        "log_max_ms": r3(max(steady) * 1000) if steady else None, "unprofiled_median_ms": r3(um),
        "profiled_steps": nums, "profiled_median_ms": r3(prof), "stretch": r3(prof / um) if prof and um else None,
        "gpu_computation_ms_per_step": r3(comp), "gpu_busy_ms_per_step": r3(busy),
        "trace_computing_pct": tl.get("computation_time"), "trace_idle_pct": tl.get("idle_time"),
        "trace_exposed_memcpy_pct": tl.get("exposed_memcpy_time"),
        "computing_share_unprofiled": r3(comp / um) if um else None,
        "idle_share_unprofiled": r3(max(0.0, 1 - busy / um)) if um else None,
        "mean_kernel_us": r3((a.get("launch") or {}).get("mean_kernel_us")), "kernels_per_step": r3(a["kernels_per_step"]),
        "gemm_conv_share_pct": round(gemm, 1),
        "dataloader_ms_per_step": r3(((b.get("mean_host_us") or {}).get("dataloader") or 0.0) / 1000),
        "largest_idle": {"category": lead.get("category"), "name": lead.get("name"), "site": lead.get("site"),
                         "ms": r3((lead.get("us") or 0.0) / 1000), "share": r3(lead.get("share"))},
        "python_stacks": b["has_python_stacks"],
    }


def ratio(case: dict[str, Any], control: dict[str, Any]) -> dict[str, Any]:
    """Case / control step ratios: of the steady median (``generate.py``'s), the unprofiled median and
    the steady mean (a stall every epoch shows in the mean, not the median)."""
    def q(k: str) -> float | None:
        return round(case[k] / control[k], 3) if case.get(k) and control.get(k) else None
    return {"median": q("log_median_ms"), "unprofiled_median": q("unprofiled_median_ms"), "mean": q("log_mean_ms")}


# ------------------------------------------------------------------------------------------------ trim
def _span(e: dict[str, Any]) -> tuple[float, float] | None:
    if "ts" not in e or e.get("ph") == "M":
        return None
    t = float(e["ts"])
    return t, t + float(e.get("dur") or 0.0)


def trim_trace(src: Path, dst: Path, keep: list[int], why: str = "") -> dict[str, Any]:
    """Write ``src`` (a kineto ``.json.gz``) to ``dst`` with only the profiled steps ``keep``: drops
    every event lying wholly inside a removed ``ProfilerStep#N`` window, except GPU events that
    overlap a kept step (their launch calls and ``ac2g`` flows stay too); metadata and events outside
    every step stay. Adds the top-level key ``ai4s_trim`` (source, kept and removed steps, events
    removed by category, why). Returns that record. Raises ValueError when a kept step is not in the
    trace, or when the kept steps' figures differ from the whole trace's (:func:`_check_same`)."""
    d = json.loads(gzip.decompress(src.read_bytes()))
    steps = _trace_steps(src)
    have = {s for s, _, _ in steps}
    if not set(keep) <= have:
        raise ValueError(f"{src}: steps {sorted(set(keep) - have)} not among the profiled steps {sorted(have)}")
    kept_w = [(t, t + dur) for s, t, dur in steps if s in keep]
    gone_w = [(t, t + dur) for s, t, dur in steps if s not in keep]

    def inside_gone(sp: tuple[float, float]) -> bool:
        return any(a <= sp[0] and sp[1] <= b for a, b in gone_w)

    def overlaps_kept(sp: tuple[float, float]) -> bool:
        return any(sp[0] < b and sp[1] > a for a, b in kept_w)

    gpu_cats = {"kernel", "gpu_memcpy", "gpu_memset"}  # not gpu_user_annotation: a removed step's GPU-side
    # ProfilerStep#N goes with its CPU-side one
    ev = d["traceEvents"]
    keep_corr = set()
    for e in ev:  # GPU events that touch a kept step keep their launch's correlation
        sp = _span(e)
        if sp and e.get("cat") in gpu_cats and (not inside_gone(sp) or overlaps_kept(sp)):
            c = (e.get("args") or {}).get("correlation")
            if c is not None:
                keep_corr.add(c)
    out, removed = [], {}
    for e in ev:
        sp = _span(e)
        corr = (e.get("args") or {}).get("correlation") if e.get("cat") != "ac2g" else e.get("id")
        drop = sp is not None and inside_gone(sp) and not (e.get("cat") in gpu_cats and overlaps_kept(sp)) \
            and corr not in keep_corr
        if drop:
            removed[str(e.get("cat"))] = removed.get(str(e.get("cat")), 0) + 1
        else:
            out.append(e)
    rec = {"source": src.name, "source_bytes": src.stat().st_size, "source_events": len(ev),
           "kept_steps": sorted(keep), "removed_steps": sorted(have - set(keep)),
           "removed_events": dict(sorted(removed.items())), "why": why,
           "by": "bench/accuracy/bundle.py trim_trace"}
    d2 = {"ai4s_trim": rec, **{k: v for k, v in d.items() if k != "traceEvents"}, "traceEvents": out}
    tmp = dst.with_name(dst.name + ".tmp")
    tmp.parent.mkdir(parents=True, exist_ok=True)
    tmp.write_bytes(gzip.compress(json.dumps(d2, separators=(",", ":")).encode(), 9))
    try:
        _check_same(src, tmp, keep)
    except ValueError:
        tmp.unlink()
        raise
    tmp.replace(dst)
    return rec


def _check_same(whole: Path, part: Path, keep: list[int]) -> None:
    """Raise ValueError unless every kept step has the same step accounting record (``trace steps``:
    GPU split, host and idle attribution, critical path, structure) and the same engine per-step row
    on the trimmed trace as on the whole one."""
    from ai4s_graph.tools.trace import engine
    from ai4s_graph.tools.trace.host_timeline import step_breakdown

    def rows(p: Path) -> tuple[dict[int, Any], dict[int, Any]]:
        b = step_breakdown(p)
        a = engine.analyze(p)
        return ({s.step: s.model_dump() for s in b.steps if s.step in keep},
                {r["step"]: r for r in a.per_step if r["step"] in keep})
    (b1, a1), (b2, a2) = rows(whole), rows(part)
    for s in keep:
        if not same(b1.get(s), b2.get(s)) or not same(a1.get(s), a2.get(s)):
            diff = sorted(k for k in (b1.get(s) or {}) if not same((b1.get(s) or {}).get(k), (b2.get(s) or {}).get(k)))
            raise ValueError(f"{whole}: step {s} differs after trimming (fields {diff or 'engine per-step row'})")


def same(x: Any, y: Any) -> bool:
    """Equal, numbers to 1e-9 relative or 1e-3 absolute (µs): the engine measures times from the
    trace's first event, so removing earlier events moves the last bits of a float sum."""
    if isinstance(x, dict) and isinstance(y, dict):
        return x.keys() == y.keys() and all(same(x[k], y[k]) for k in x)
    if isinstance(x, (list, tuple)) and isinstance(y, (list, tuple)):
        return len(x) == len(y) and all(same(a, b) for a, b in zip(x, y))
    if isinstance(x, float) or isinstance(y, float):
        return isinstance(x, (int, float)) and isinstance(y, (int, float)) and \
            math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-3)
    return x == y


# ------------------------------------------------------------------------------------------------ bundle
def truth_for(c: dict[str, Any], run: Path, measured: dict[str, Any]) -> dict[str, Any]:
    """``truth.json`` of a bundled case: the truth of ``cases.py`` (the keys of :data:`TRUTH_KEYS`
    it has), the case's jobid/name/gpus/env, the workload's ``sites`` (from the returned truth) and
    ``measured``."""
    t = {k: c["truth"][k] for k in TRUTH_KEYS if k in c["truth"]}
    back = json.loads((run / "truth.json").read_text()) if (run / "truth.json").exists() else {}
    out = {**t, "jobid": c["jobid"], "name": c["name"], "gpus": c["gpus"], "env": c["env"]}
    if back.get("sites"):
        out["sites"] = back["sites"]
    out["measured"] = measured
    return out


def bundle(runs: Path, dest: Path, only: set[str] | None = None) -> list[str]:
    """Bundle every ``bench`` case of :mod:`cases` found in ``runs`` (or only the jobids ``only``)
    into ``dest/<name>/``, replacing what was there. Returns one line per case."""
    todo = [c for c in C.CASES if c["bench"] and (runs / c["jobid"] / "manifest.json").exists()
            and (only is None or c["jobid"] in only)]
    meas = {c["jobid"]: measure(runs / c["jobid"]) for c in todo}
    lines = []
    for c in todo:
        run, jid = runs / c["jobid"], c["jobid"]
        m = dict(meas[jid])
        ctl = c["truth"].get("control")
        if ctl and (runs / ctl / "manifest.json").exists():
            m["ratio_to_control"] = ratio(m, meas.get(ctl) or measure(runs / ctl))
        out = dest / c["name"]
        if out.is_symlink() or out.is_file():
            out.unlink()
        shutil.rmtree(out, ignore_errors=True)
        (out / "traces").mkdir(parents=True)
        for f in FILES:
            if (run / f).exists():
                shutil.copy(run / f, out / f)
        shutil.copytree(run / "telemetry", out / "telemetry")
        note = ""
        for tr in sorted((run / "traces").glob("*.json.gz")):
            if tr.name == "trace_rank0.json.gz" and jid in TRIM:
                rec = trim_trace(tr, out / "traces" / tr.name, *TRIM[jid])
                note = f", trimmed to steps {rec['kept_steps']} ({rec['source_bytes'] // 1024} KiB before)"
            else:
                shutil.copy(tr, out / "traces" / tr.name)
        (out / "truth.json").write_text(json.dumps(truth_for(c, run, m), indent=1) + "\n")
        size = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
        lines.append(f"{jid} {c['name']}: {size // 1024} KiB{note}; ratio {m.get('ratio_to_control')}")
    return lines


def how(c: dict[str, Any]) -> str:
    """A case's construction in a few words: the first clause of its notes (the measured part cut)."""
    text = c["truth"]["notes"].split(". measured", 1)[0].split(". NOT made", 1)[0]
    first = text.split(": ", 1)[0] if len(text.split(": ", 1)[0]) > 20 else text
    return (first[:110] + "...") if len(first) > 113 else first


def table(dest: Path) -> str:
    """The README's table of every bundled case (and every case not made), from ``cases.py`` and
    each bundled ``truth.json`` / ``manifest.json`` / ``run_info.json``: case, jobid, how the fault
    was made, cause, class (scored or not), control, first lever, the step ratio against the
    control (median / mean of the steady steps), and when, on what, with which torch it ran."""
    import datetime as dt

    got = {t["jobid"]: d for d, t in ((d, json.loads((d / "truth.json").read_text()))
                                      for d in sorted(dest.iterdir()) if (d / "truth.json").exists())}
    rows = ["| case | jobid | fault (how) | cause | class | control | first lever | ratio median / mean | made |",
            "|---|---|---|---|---|---|---|---|---|"]
    for c in sorted(C.CASES, key=lambda c: (c["gpus"], c["jobid"])):
        if not c["bench"] and not c["pending"]:
            continue
        t, d = c["truth"], got.get(c["jobid"])
        made = "not made (pending)"
        ratio_s = "-"
        if d is not None:
            man = json.loads((d / "manifest.json").read_text())
            info = json.loads((d / "run_info.json").read_text())
            day = dt.datetime.fromtimestamp(info["start_unix"], dt.timezone.utc).strftime("%Y-%m-%d")
            made = f"{day}, {man['gpus_per_node'] * man['num_nodes']}x {man['gpu'].replace('NVIDIA ', '')}, " \
                   f"torch {man['torch']}"
            r = json.loads((d / "truth.json").read_text()).get("measured", {}).get("ratio_to_control")
            if r:
                ratio_s = f"{r['median']:.2f} / {r['mean']:.2f}"
        cause = t["cause"] + (" (not scored: no effect)" if t.get("score_cause") is False else "")
        if t.get("present"):
            cause += f" (has: {', '.join(t['present'])})"
        klass = t["class"] or "(not scored)"
        if "borderline" in t["notes"]:
            klass += " (borderline)"
        ctl = t.get("control") or (f"(of {', '.join(t['control_of'])})" if t.get("control_of") else "-")
        rows.append(f"| {c['name']} | {c['jobid']} | {how(c)} | {cause} | {klass} | {ctl} | "
                    f"{t.get('lever') or '-'} | {ratio_s} | {made} |")
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", help="the returned runs directory (<jobid>/ per case)")
    ap.add_argument("--dest", default=str(HERE / "cases"))
    ap.add_argument("--only", default="", help="comma-separated jobids")
    ap.add_argument("--table", action="store_true", help="print the README's table of the bundled cases and exit")
    a = ap.parse_args(argv)
    if a.table:
        print(table(Path(a.dest)), end="")
        return 0
    only = {j for j in a.only.split(",") if j} or None
    try:
        lines = bundle(Path(a.runs), Path(a.dest), only)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        print(f"STATUS=fail; reason={e}")
        return 1
    print("\n".join(lines))
    print(f"STATUS=ok; reason={len(lines)} cases bundled into {a.dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
