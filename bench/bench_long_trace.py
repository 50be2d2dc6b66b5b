"""Benchmark at the parse limit (issue 29): on one long profile, ``ai4s-graph trace timeline`` and the
whole ``ai4s-graph run`` against TraceLens's ``generate_perf_report_pytorch``, side by side in one run;
then a 1 GB trace, and the cost curve of ``run`` over 1, 8 and 64 rank traces of real size.

Each command runs in a fresh child process. Wall time is the child's; CPU time is user + system of
the child and every descendant it waited for (``RUSAGE_CHILDREN``: less sensitive to other load on a
shared machine than wall time); peak RSS is the peak of the summed RSS of the child and all its
descendants (VictoriaMetrics, pool workers), sampled every 20 ms with psutil; beside it the peak of the
summed PSS (proportional set size, ``/proc/<pid>/smaps_rollup``: a page shared by k processes counts
1/k in each, where RSS counts it in full in each; sampled every 100 ms, so a lower estimate), what
the processes together hold of the machine's memory. The timeline rows of
``trace timeline --json`` are compared with TraceLens's ``gpu_timeline.csv`` on the same file. Missing
big and cost-curve traces are made by ``bench/make_long_trace.py`` (steps of the bundled example 92001 replicated in
kineto's layout). The children run with bytecode caching on (a user's install has its ``.pyc``
files) after one warm-up import. This is a benchmark, not a test: nothing here asserts a speed.

    python bench/bench_long_trace.py --trace /work/bigtraces/long_rank0.json.gz \\
        --tracelens-path /tmp/tracelens-site --big-trace /work/bigtraces/1gb_rank0.json.gz \\
        --curve-dir /work/bigtraces/curve --results bench/RESULTS.md --readme README.md
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

from bench_traces import _tree_mem, _tree_rss, machine  # noqa: E402
import make_long_trace  # noqa: E402

ROWS = ("computation_time", "exposed_comm_time", "exposed_memcpy_time", "busy_time", "idle_time", "total_time")
BEGIN, END = "<!-- long-trace:begin -->", "<!-- long-trace:end -->"
README_BEGIN, README_END = "<!-- long-trace-table:begin -->", "<!-- long-trace-table:end -->"
#: Run files (manifest, training log, telemetry) used when the trace's folder has none: the example
#: whose steps make the replicated traces.
DEFAULT_RUN_FILES = REPO / "examples" / "perf-runs" / "92001"
#: Issue 29's targets.
TIMELINE_X, RUN_X, BIG_S = 25.0, 10.0, 15.0


def replace_block(path: Path, begin: str, end: str, text: str) -> None:
    """Write ``text`` (which starts with ``begin`` and ends with ``end``) over that block of ``path``,
    or append it when the file has no such block."""
    old = path.read_text() if path.is_file() else ""
    if begin in old and end in old:
        new = old[: old.index(begin)] + text + old[old.index(end) + len(end) + 1:]
    else:
        new = old.rstrip() + "\n\n" + text
    path.write_text(new)


def commit() -> str:
    """The checkout's commit (short hash, ``+dirty`` with uncommitted changes)."""
    try:
        h = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO,
                               capture_output=True, text=True).stdout.strip()
        return h + ("+dirty" if dirty else "")
    except OSError:
        return "?"


def uncompressed_bytes(path: Path) -> int:
    """Bytes of JSON text in the file (gunzipped when it is gzip), streamed in 1 MiB reads."""
    with open(path, "rb") as fh:
        gz = fh.read(2) == b"\x1f\x8b"
    n = 0
    with (gzip.open(path, "rb") if gz else open(path, "rb")) as fh:
        while chunk := fh.read(1 << 20):
            n += len(chunk)
    return n


#: Samples of the summed RSS per sample of the summed PSS (``smaps_rollup`` walks every mapping:
#: dearer to read than ``statm``): PSS every 5 x 20 ms.
PSS_EVERY = 5


def timed(cmd: list[str], env: dict[str, str], timeout_s: float) -> dict:
    """Run ``cmd``: wall s, CPU s (user + system of the child and its waited-for descendants), peak
    tree RSS and peak tree PSS (bytes, see the module docstring), status, stdout, stderr tail."""
    out, err = tempfile.TemporaryFile(mode="w+"), tempfile.TemporaryFile(mode="w+")
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    child = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, text=True, cwd=str(REPO))
    ps = psutil.Process(child.pid)
    peak, peak_pss, status, n = 0, 0, "ok", 0
    while child.poll() is None:
        peak = max(peak, _tree_rss(ps))
        if n % PSS_EVERY == 0:
            peak_pss = max(peak_pss, _tree_mem(ps, "pss"))
        n += 1
        if time.perf_counter() - t0 > timeout_s:
            for c in ps.children(recursive=True):
                c.kill()
            child.kill()
            status = f"timeout>{timeout_s:.0f}s"
            break
        time.sleep(0.02)
    child.wait()
    wall = time.perf_counter() - t0
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (ru.ru_utime - ru0.ru_utime) + (ru.ru_stime - ru0.ru_stime)
    out.seek(0)
    err.seek(0)
    o, e = out.read(), err.read()
    if status == "ok" and child.returncode != 0:
        status = f"exit {child.returncode}: " + (e.strip().splitlines() or ["?"])[-1][:160]
    return {"status": status, "wall_s": wall, "cpu_s": cpu, "peak_rss": peak, "peak_pss": peak_pss, "stdout": o,
            "stderr": e[-2000:]}


_TL_CHILD = """
import sys
from TraceLens.Reporting.generate_perf_report_pytorch import generate_perf_report_pytorch
for i, path in enumerate(sys.argv[2:]):
    generate_perf_report_pytorch(path, output_csvs_dir=f"{sys.argv[1]}/{i}")
"""

_PARSE_CHILD = """
import json, sys
from ai4s_graph.tools.trace import fastscan, stream
from pathlib import Path
from ai4s_graph.tools.trace import scan_parallel
n = sum(1 for _ in stream.iter_events(sys.argv[1], fields="engine"))
print(json.dumps({"events": n, **fastscan.last_parse,
                  "workers": [scan_parallel.workers_for(Path(p)) for p in sys.argv[1:]]}))
"""


def perf_run(dirpath: Path, traces: list[Path], files: Path) -> str:
    """A run directory with ``traces`` (linked) and the manifest / training log / telemetry of ``files``;
    returns the job id."""
    shutil.rmtree(dirpath, ignore_errors=True)
    (dirpath / "traces").mkdir(parents=True)
    names = []
    for r, t in enumerate(traces):
        name = f"traces/trace_rank{r}" + (".json.gz" if t.name.endswith(".gz") else ".json")
        (dirpath / name).symlink_to(t.resolve())
        names.append(name)
    man = json.loads((files / "manifest.json").read_text()) if (files / "manifest.json").is_file() else {}
    for name in ("train.log",):
        if (files / name).is_file():
            shutil.copy(files / name, dirpath / name)
    tele = [t for t in (man.get("artifacts") or {}).get("telemetry", []) if (files / t).exists()]
    for t in tele:
        (dirpath / t).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(files / t, dirpath / t)
    man.setdefault("artifacts", {}).update(traces=names, telemetry=tele)
    man.setdefault("jobid", "900")
    (dirpath / "manifest.json").write_text(json.dumps(man, indent=1))
    return str(man["jobid"])


class Bench:
    """The children's environment and the commands."""

    def __init__(self, a: argparse.Namespace) -> None:
        self.a = a
        env = dict(os.environ)
        # the checkout first, then whatever the caller's path holds (wheels installed with --target)
        env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        env.pop("AI4S_TRACE_CACHE", None)
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # a user's install keeps its bytecode
        self.env = env
        self.py = sys.executable

    def warm_up(self) -> None:
        subprocess.run([self.py, "-c", "import ai4s_graph.cli, ai4s_graph.graph.analysis.graph, "
                                       "ai4s_graph.graph.analysis.nodes.synthesizer, msgspec"],
                       env=self.env, cwd=str(REPO), check=False)

    def timeline(self, trace: Path) -> dict:
        return timed([self.py, "-m", "ai4s_graph.cli", "trace", "timeline", str(trace), "--json"], self.env,
                     self.a.timeout)

    def run(self, run_dir: Path, jobid: str, tag: str, **env_more: str) -> dict:
        scratch = self.a.scratch / tag
        shutil.rmtree(scratch, ignore_errors=True)
        env = dict(self.env, AI4S_STATE_DIR=str(scratch / "state"), **env_more)
        return timed([self.py, "-m", "ai4s_graph.cli", "run", "--job", jobid, "--perf-run", str(run_dir),
                      "--out", str(scratch / "out"), "--checkpoint", str(scratch / "ck.sqlite")], env, self.a.timeout)

    def tracelens(self, traces: list[Path], out: Path) -> dict:
        if not self.a.tracelens_path:
            return {"status": "not installed (--tracelens-path)", "wall_s": 0.0, "cpu_s": 0.0, "peak_rss": 0,
                    "peak_pss": 0}
        env = dict(self.env, PYTHONPATH=os.pathsep.join([self.a.tracelens_path, self.env["PYTHONPATH"]]))
        shutil.rmtree(out, ignore_errors=True)
        return timed([self.py, "-c", _TL_CHILD, str(out)] + [str(t) for t in traces], env, self.a.timeout * len(traces))

    def parse_stats(self, trace: Path, *more: Path) -> dict:
        """The one pass's parse of ``trace`` (events, pieces, fallback) and the worker processes
        ``trace timeline`` reads ``trace`` and each of ``more`` with (:func:`.scan_parallel.workers_for`)."""
        r = timed([self.py, "-c", _PARSE_CHILD, str(trace), *map(str, more)], self.env, self.a.timeout)
        try:
            return json.loads(r["stdout"].strip().splitlines()[-1])
        except (ValueError, IndexError):
            return {"error": r["status"]}


def ensure_trace(path: Path, size_mb: float) -> Path:
    if not path.is_file():
        print(f"making {path} ({size_mb:g} MB of JSON) with bench/make_long_trace.py")
        make_long_trace.make(path, size_mb=size_mb)
    return path


def _x(base: dict, ours: dict, what: str) -> float | None:
    if base.get("status") != "ok" or ours.get("status") != "ok" or not ours.get(what):
        return None
    return base[what] / ours[what]


def _fx(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}x"


def main() -> None:  # noqa: C901 - one report, section by section
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", required=True, type=Path, help="the long kineto trace (.json or .json.gz); a "
                                                                "replicated one: bench/make_long_trace.py --size-mb 176")
    ap.add_argument("--run-files", type=Path, help="folder with manifest.json / train.log / telemetry for the run "
                                                   "(default: the trace's folder when it has a manifest, else example 92001)")
    ap.add_argument("--tracelens-path", default=os.environ.get("AI4S_TRACELENS_PATH"),
                    help="extra PYTHONPATH entry where TraceLens is installed (only the TraceLens children get it)")
    ap.add_argument("--big-trace", type=Path, help="a ~1 GB trace (made when missing); leave out to skip")
    ap.add_argument("--big-mb", type=float, default=1000.0)
    ap.add_argument("--curve-dir", type=Path, help="folder for the rank sets of the cost curve; leave out to skip")
    ap.add_argument("--curve-mb", type=float, default=20.0, help="MB of JSON per rank trace of the cost curve")
    ap.add_argument("--curve-ranks", type=int, nargs="+", default=[1, 8, 64])
    ap.add_argument("--tracelens-curve-max", type=int, default=8,
                    help="TraceLens runs on rank sets up to this many ranks (each rank in turn)")
    ap.add_argument("--scratch", type=Path, default=Path(tempfile.gettempdir()) / "ai4s-bench-long")
    ap.add_argument("--timeout", type=float, default=900.0)
    ap.add_argument("--results", type=Path, help="RESULTS.md to write the tables into")
    ap.add_argument("--readme", type=Path, help="README.md whose scale table (between the long-trace-table markers) "
                                                 "is rewritten from this same run")
    a = ap.parse_args()
    a.scratch.mkdir(parents=True, exist_ok=True)
    b = Bench(a)
    if not a.trace.is_file():
        sys.exit(f"{a.trace}: no such trace (make a replicated one: python bench/make_long_trace.py --size-mb 176 "
                 f"--out {a.trace})")
    trace = a.trace.resolve()
    files = (a.run_files or (trace.parent if (trace.parent / "manifest.json").is_file() else DEFAULT_RUN_FILES)).resolve()
    size = uncompressed_bytes(trace)
    print(f"{trace.name}: {trace.stat().st_size / 1e6:.1f} MB on disk, {size / 1e6:.1f} MB of JSON; run files {files}")
    b.warm_up()
    load0, rev, t_start = os.getloadavg()[0], commit(), time.gmtime()
    res: dict[str, dict] = {}
    jobid = perf_run(a.scratch / "run-long", [trace], files)
    res["timeline"] = b.timeline(trace)
    print(f"timeline  {res['timeline']['status']} {res['timeline']['wall_s']:.1f} s")
    res["run"] = b.run(a.scratch / "run-long", jobid, "long")
    print(f"run       {res['run']['status']} {res['run']['wall_s']:.1f} s")
    # the lanes without the parallel pass's workers (tools/trace/onepass.py lane_workers): the configuration before them
    res["run_serial"] = b.run(a.scratch / "run-long", jobid, "long-serial", AI4S_SCAN_WORKERS="0")
    print(f"run (lanes, no workers) {res['run_serial']['status']} {res['run_serial']['wall_s']:.1f} s")
    res["run_one"] = b.run(a.scratch / "run-long", jobid, "long-one", AI4S_TRACE_LANES="0")  # tools/trace/lanes.py
    print(f"run (one process) {res['run_one']['status']} {res['run_one']['wall_s']:.1f} s")
    tl_out = a.scratch / "tracelens_csvs"
    res["tracelens"] = b.tracelens([trace], tl_out)
    print(f"tracelens {res['tracelens']['status']} {res['tracelens']['wall_s']:.1f} s")
    parse = b.parse_stats(trace, *([ensure_trace(a.big_trace, a.big_mb).resolve()] if a.big_trace else []))
    workers = parse.get("workers") or ["?", "?"]

    big: dict[str, dict] = {}
    big_size = 0
    if a.big_trace:
        bt = ensure_trace(a.big_trace, a.big_mb).resolve()
        big_size = uncompressed_bytes(bt)
        big["timeline"] = b.timeline(bt)
        print(f"1 GB timeline {big['timeline']['status']} {big['timeline']['wall_s']:.1f} s")
        big_job = perf_run(a.scratch / "run-big", [bt], files)
        big["run"] = b.run(a.scratch / "run-big", big_job, "big")
        print(f"1 GB run      {big['run']['status']} {big['run']['wall_s']:.1f} s")
        # the lanes past LANES_MAX_JSON_BYTES (tools/trace/lanes.py): the speed the size cap gives up for memory
        big["run_lanes"] = b.run(a.scratch / "run-big", big_job, "big-lanes", AI4S_TRACE_LANES="1")
        print(f"1 GB run, lanes {big['run_lanes']['status']} {big['run_lanes']['wall_s']:.1f} s")

    curve: list[tuple[int, int, dict, dict]] = []
    if a.curve_dir:
        for n in a.curve_ranks:
            ranks = make_long_trace.make_set(a.curve_dir / f"{a.curve_mb:g}mb-{n}r", size_mb=a.curve_mb, ranks=n)
            paths = [Path(ranks[r]) for r in sorted(ranks)]
            json_bytes = sum(uncompressed_bytes(p) for p in paths)
            r = b.run(a.scratch / f"run-{n}r", perf_run(a.scratch / f"run-{n}r", paths, files), f"curve-{n}")
            tl = b.tracelens(paths, a.scratch / f"tl-{n}r") if n <= a.tracelens_curve_max else \
                {"status": f"not run (> {a.tracelens_curve_max} ranks)"}
            print(f"curve {n:3d} ranks: run {r['status']} {r['wall_s']:.1f} s; tracelens {tl['status']}")
            curve.append((n, json_bytes, r, tl))
    load1 = os.getloadavg()[0]

    # ------------------------------------------------------------------ the report
    diff_pct = ours = tl_rows = None
    if res["timeline"]["status"] == "ok" and (tl_out / "0" / "gpu_timeline.csv").is_file():
        ours = json.loads(res["timeline"]["stdout"])
        tl_rows = {r["type"]: float(r["time ms"]) for r in csv.DictReader(open(tl_out / "0" / "gpu_timeline.csv"))}
        diff_pct = max(abs(ours[k]["time_ms"] - tl_rows[k]) for k in ROWS) / tl_rows["total_time"] * 100.0
    run_status = [ln for ln in res["run"]["stdout"].splitlines() if "STATUS=" in ln]
    mib = lambda v: f"{v / 2**20:.0f}"  # noqa: E731
    tlr = res["tracelens"]
    lines = [BEGIN, "", "## At the parse limit: one long profile, a 1 GB trace, the cost curve (issue 29)", "",
             f"Produced by one run of `python bench/bench_long_trace.py --trace {trace.name} ...` on "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', t_start)}, commit `{rev}`.", "",
             f"**Machine:** {machine()}; load average {load0:.1f} at the start and {load1:.1f} at the end (on a "
             "shared machine wall times carry that load; CPU times and the ratios of CPU times much less).", "",
             f"**Trace:** `{trace.name}`: {trace.stat().st_size / 1e6:.1f} MB gzip, **{size / 1e6:.1f} MB of JSON**; "
             f"run files from `{files.relative_to(REPO) if files.is_relative_to(REPO) else files}`. "
             f"Fast parse: {parse.get('events', '?')} events in {parse.get('pieces', '?')} pieces, "
             f"{'no fallback to ijson' if parse.get('fallback') is None and 'error' not in parse else parse}. "
             f"`trace timeline` reads it with {workers[0]} worker processes (`tools/trace/scan_parallel.py`; 0: the "
             f"one pass)" + (f", the 1 GB trace with {workers[1]}." if a.big_trace and len(workers) > 1 else "."), "",
             "| command | status | wall s | CPU s | peak RSS MiB (all processes) | peak PSS MiB (all processes) | "
             "TraceLens wall / ours | TraceLens CPU / ours | TraceLens RSS / ours |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for k, label in (("timeline", "`ai4s-graph trace timeline --json`"), ("run", "`ai4s-graph run` (whole graph)"),
                     ("run_serial", "`ai4s-graph run`, lanes without the parallel pass's workers (`AI4S_SCAN_WORKERS=0`)"),
                     ("run_one", "`ai4s-graph run`, the trace read in one process (`AI4S_TRACE_LANES=0`)"),
                     ("tracelens", "TraceLens `generate_perf_report_pytorch`")):
        r = res[k]
        one = k == "tracelens"
        lines.append(f"| {label} | {r['status']} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | {mib(r['peak_rss'])} | "
                     f"{mib(r['peak_pss'])} | "
                     f"{'1' if one else _fx(_x(tlr, r, 'wall_s'))} | {'1' if one else _fx(_x(tlr, r, 'cpu_s'))} | "
                     f"{'1' if one else _fx(_x(tlr, r, 'peak_rss'))} |")
    lines += ["", "Targets (issue 29) and what this run gives:", ""]
    for k, x in (("timeline", TIMELINE_X), ("run", RUN_X)):
        w, c = _x(tlr, res[k], "wall_s"), _x(tlr, res[k], "cpu_s")
        lines.append(f"- `{k}` >= {x:g}x faster than TraceLens: {'met' if w and w >= x else 'NOT met'} "
                     f"(wall {_fx(w)}, CPU {_fx(c)})")
    for k in ("timeline", "run"):
        ok = res[k]["status"] == "ok" and res[k]["peak_rss"] <= size
        lines.append(f"- peak RSS of `{k}` (summed over its processes) <= JSON size ({mib(size)} MiB): "
                     f"{'met' if ok else 'NOT met'} ({mib(res[k]['peak_rss'])} MiB; summed PSS "
                     f"{mib(res[k]['peak_pss'])} MiB)")
    if big:
        for k in ("timeline", "run"):
            r = big[k]
            ok = r["status"] == "ok" and r["wall_s"] < BIG_S and r["peak_rss"] <= big_size
            lines.append(f"- {big_size / 1e9:.2f} GB trace, `{k}` < {BIG_S:g} s within {mib(big_size)} MiB: "
                         f"{'met' if ok else 'NOT met'} ({r['status']}, {r['wall_s']:.1f} s wall, {r['cpu_s']:.1f} s CPU, "
                         f"{mib(r['peak_rss'])} MiB; PSS {mib(r['peak_pss'])} MiB)")
        r = big["run_lanes"]
        lines.append(f"- (the same `run` with its lanes forced past the size cap, `AI4S_TRACE_LANES=1`: {r['status']}, "
                     f"{r['wall_s']:.1f} s wall, {r['cpu_s']:.1f} s CPU, {mib(r['peak_rss'])} MiB; PSS "
                     f"{mib(r['peak_pss'])} MiB)")
    if diff_pct is not None:
        lines.append(f"- timeline rows equal to TraceLens's within 0.1% of total time: "
                     f"{'met' if diff_pct <= 0.1 else 'NOT met'} (largest difference {diff_pct:.2g}% of total)")
        lines += ["", "| row | ours ms | TraceLens ms |", "| --- | ---: | ---: |"]
        lines += [f"| {k} | {ours[k]['time_ms']:.3f} | {tl_rows[k]:.3f} |" for k in ROWS]
    else:
        lines.append("- timeline rows vs TraceLens: not compared (a command failed or TraceLens is not installed)")
    if curve:
        lines += ["", f"**Cost curve:** `ai4s-graph run` over N rank traces of {a.curve_mb:g} MB of JSON each "
                      "(`bench/make_long_trace.py` sets: the example's steps, one file per rank), against TraceLens "
                      "on each rank in turn:", "",
                  "| ranks | JSON MB | run wall s | run CPU s | run peak RSS MiB | s per rank (wall) | "
                  "TraceLens wall s | TraceLens peak RSS MiB | TraceLens / run (wall) |",
                  "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for n, jb, r, tl in curve:
            tl_w = f"{tl['wall_s']:.1f}" if tl.get("status") == "ok" else tl.get("status", "-")
            tl_m = mib(tl["peak_rss"]) if tl.get("status") == "ok" else "-"
            lines.append(f"| {n} | {jb / 1e6:.0f} | {r['wall_s']:.1f} | {r['cpu_s']:.1f} | {mib(r['peak_rss'])} | "
                         f"{r['wall_s'] / n:.2f} | {tl_w} | {tl_m} | {_fx(_x(tl, r, 'wall_s'))} |")
        lines.append("")
        lines += [f"- {n} ranks: {r['status']}" for n, _jb, r, _tl in curve if r["status"] != "ok"]
    if run_status:
        lines += ["", "`run`'s STATUS lines on the long profile:", "", "```"] + run_status[-12:] + ["```"]
    lines += ["", END]
    text = "\n".join(lines) + "\n"
    print(text)
    if a.results:
        replace_block(a.results, BEGIN, END, text)
    if a.readme:
        w = lambda r: f"{r['wall_s']:.1f} s"  # noqa: E731
        rows = [README_BEGIN,
                f"| command (`{trace.name}`, {size / 1e6:.0f} MB of JSON; commit `{rev}`, load average {load0:.1f}) "
                "| wall | CPU | peak RSS, all processes |", "|---|---|---|---|",
                f"| `ai4s-graph trace timeline` | {w(res['timeline'])} ({_fx(_x(tlr, res['timeline'], 'wall_s'))} faster "
                f"than TraceLens) | {res['timeline']['cpu_s']:.1f} s | {mib(res['timeline']['peak_rss'])} MiB "
                f"({_fx(_x(tlr, res['timeline'], 'peak_rss'))} less) |",
                f"| `ai4s-graph run` (whole graph, the verifier's reader included) | {w(res['run'])} "
                f"({_fx(_x(tlr, res['run'], 'wall_s'))} faster) | {res['run']['cpu_s']:.1f} s | {mib(res['run']['peak_rss'])} MiB "
                f"({_fx(_x(tlr, res['run'], 'peak_rss'))} less) |",
                f"| `run`, the trace read in one process (`AI4S_TRACE_LANES=0`) | {w(res['run_one'])} "
                f"({_fx(_x(tlr, res['run_one'], 'wall_s'))} faster) | {res['run_one']['cpu_s']:.1f} s | "
                f"{mib(res['run_one']['peak_rss'])} MiB |",
                f"| TraceLens `generate_perf_report_pytorch` | {w(tlr)} | {tlr['cpu_s']:.1f} s | {mib(tlr['peak_rss'])} MiB |"]
        if big:
            rows += [f"| `trace timeline` / `run`, {big_size / 1e9:.2f} GB of JSON | {w(big['timeline'])} / {w(big['run'])} "
                     f"| {big['timeline']['cpu_s']:.1f} / {big['run']['cpu_s']:.1f} s | "
                     f"{mib(big['timeline']['peak_rss'])} / {mib(big['run']['peak_rss'])} MiB |"]
        rows += [f"| `run`, {n} rank{'s' if n != 1 else ''} x {a.curve_mb:g} MB | {w(r)} | {r['cpu_s']:.1f} s | "
                 f"{mib(r['peak_rss'])} MiB |"
                 for n, _jb, r, _tl in curve]
        rows.append(README_END)
        replace_block(a.readme, README_BEGIN, README_END, "\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
