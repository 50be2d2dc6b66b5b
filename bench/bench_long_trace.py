"""Benchmark on one long real profile: ``ai4s-graph trace timeline`` and the whole ``ai4s-graph run``
against TraceLens's ``generate_perf_report_pytorch`` on the same file (issue 12's targets).

Each command runs in a fresh child process; wall time is the child's, peak RSS the peak of the
summed RSS of the child and all its descendants (sampled every 20 ms with psutil). The timeline
rows of ``trace timeline --json`` are compared with TraceLens's ``gpu_timeline`` on the same file.
One run of this script writes the table into ``bench/RESULTS.md`` (between the ``long-trace``
markers). This is a benchmark, not a test: nothing here asserts a speed.

    python bench/bench_long_trace.py --trace /work/main/.device/bench-trace/gnn-h200-130steps.json.gz \\
        --tracelens-path /path/to/TraceLens-site --results bench/RESULTS.md
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import os
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

from bench_traces import _tree_rss, machine  # noqa: E402

ROWS = ("computation_time", "exposed_comm_time", "exposed_memcpy_time", "busy_time", "idle_time", "total_time")
BEGIN, END = "<!-- long-trace:begin -->", "<!-- long-trace:end -->"
README_BEGIN, README_END = "<!-- long-trace-table:begin -->", "<!-- long-trace-table:end -->"


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
    opener = gzip.open if path.read_bytes()[:2] == b"\x1f\x8b" else open
    n = 0
    with opener(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            n += len(chunk)
    return n


def timed(cmd: list[str], env: dict[str, str], timeout_s: float) -> dict:
    """Run ``cmd``; wall seconds, peak tree RSS (bytes), exit code, stdout, stderr tail."""
    out, err = tempfile.TemporaryFile(mode="w+"), tempfile.TemporaryFile(mode="w+")
    t0 = time.perf_counter()
    child = subprocess.Popen(cmd, stdout=out, stderr=err, env=env, text=True, cwd=str(REPO))
    ps = psutil.Process(child.pid)
    peak, status = 0, "ok"
    while child.poll() is None:
        peak = max(peak, _tree_rss(ps))
        if time.perf_counter() - t0 > timeout_s:
            for c in ps.children(recursive=True):
                c.kill()
            child.kill()
            status = f"timeout>{timeout_s:.0f}s"
            break
        time.sleep(0.02)
    child.wait()
    wall = time.perf_counter() - t0
    out.seek(0)
    err.seek(0)
    o, e = out.read(), err.read()
    if status == "ok" and child.returncode != 0:
        status = f"exit {child.returncode}: " + (e.strip().splitlines() or ["?"])[-1][:160]
    return {"status": status, "wall_s": wall, "peak_rss": peak, "stdout": o, "stderr": e[-2000:]}


_TL_CHILD = """
import sys
from TraceLens.Reporting.generate_perf_report_pytorch import generate_perf_report_pytorch
generate_perf_report_pytorch(sys.argv[1], output_csvs_dir=sys.argv[2])
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", required=True, type=Path, help="one long kineto trace (.json or .json.gz)")
    ap.add_argument("--run-files", type=Path, help="folder with manifest.json / train.log for the run (default: "
                                                   "the trace's folder)")
    ap.add_argument("--tracelens-path", default=os.environ.get("AI4S_TRACELENS_PATH"),
                    help="extra PYTHONPATH entry where TraceLens is installed (only the TraceLens child gets it)")
    ap.add_argument("--scratch", type=Path, default=Path(tempfile.gettempdir()) / "ai4s-bench-long")
    ap.add_argument("--timeout", type=float, default=900.0)
    ap.add_argument("--results", type=Path, help="RESULTS.md to write the table into")
    ap.add_argument("--readme", type=Path, help="README.md whose scale table (between the long-trace-table markers) "
                                                 "is rewritten from this same run")
    a = ap.parse_args()

    trace = a.trace.resolve()
    files = (a.run_files or trace.parent).resolve()
    shutil.rmtree(a.scratch, ignore_errors=True)
    run_dir = a.scratch / "run"
    (run_dir / "traces").mkdir(parents=True)
    suffix = ".json.gz" if trace.name.endswith(".gz") else ".json"
    (run_dir / "traces" / f"trace_rank0{suffix}").symlink_to(trace)
    for name in ("train.log",):
        if (files / name).is_file():
            shutil.copy(files / name, run_dir / name)
    man = json.loads((files / "manifest.json").read_text()) if (files / "manifest.json").is_file() else {}
    jobid = str(man.get("jobid", "900"))
    if man:
        man.setdefault("artifacts", {})["traces"] = [f"traces/trace_rank0{suffix}"]
        man["artifacts"]["telemetry"] = [t for t in man["artifacts"].get("telemetry", []) if (files / t).exists()]
        (run_dir / "manifest.json").write_text(json.dumps(man, indent=1))
    size = uncompressed_bytes(trace)
    print(f"{trace.name}: {trace.stat().st_size / 1e6:.1f} MB on disk, {size / 1e6:.1f} MB of JSON")

    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO)
    env["AI4S_STATE_DIR"] = str(a.scratch / "state")
    env.pop("AI4S_TRACE_CACHE", None)
    py = sys.executable
    load0, rev = os.getloadavg()[0], commit()
    res: dict[str, dict] = {}
    res["timeline"] = timed([py, "-m", "ai4s_graph.cli", "trace", "timeline", str(trace), "--json"], env, a.timeout)
    print(f"timeline  {res['timeline']['status']} {res['timeline']['wall_s']:.1f} s")
    res["run"] = timed([py, "-m", "ai4s_graph.cli", "run", "--job", jobid, "--perf-run", str(run_dir),
                        "--out", str(a.scratch / "out"), "--checkpoint", str(a.scratch / "ck.sqlite")], env, a.timeout)
    print(f"run       {res['run']['status']} {res['run']['wall_s']:.1f} s")
    tl_env = dict(env)
    if a.tracelens_path:
        tl_env["PYTHONPATH"] = os.pathsep.join([a.tracelens_path, str(REPO)])
    tl_out = a.scratch / "tracelens_csvs"
    res["tracelens"] = timed([py, "-c", _TL_CHILD, str(trace), str(tl_out)], tl_env, a.timeout)
    print(f"tracelens {res['tracelens']['status']} {res['tracelens']['wall_s']:.1f} s")

    # timeline rows: ours vs TraceLens's
    diff_pct = None
    ours = tl_rows = None
    if res["timeline"]["status"] == "ok" and (tl_out / "gpu_timeline.csv").is_file():
        ours = json.loads(res["timeline"]["stdout"])
        tl_rows = {r["type"]: float(r["time ms"]) for r in csv.DictReader(open(tl_out / "gpu_timeline.csv"))}
        total = tl_rows["total_time"]
        diff_pct = max(abs(ours[k]["time_ms"] - tl_rows[k]) for k in ROWS) / total * 100.0
    run_status = [ln for ln in res["run"]["stdout"].splitlines() if "STATUS=" in ln]

    def ratio(k: str, what: str) -> str:
        if res[k]["status"] != "ok" or res["tracelens"]["status"] != "ok":
            return "-"
        return f"{res['tracelens'][what] / res[k][what]:.1f}x"

    mib = lambda b: f"{b / 2**20:.0f}"  # noqa: E731
    lines = [BEGIN, "", "## One long real profile: `trace timeline` and `run` against TraceLens (issue 12)", "",
             f"Produced by one run of `python bench/bench_long_trace.py --trace {trace.name} ...` on "
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit `{rev}`.", "",
             f"**Machine:** {machine()}; load average {load0:.1f} at the start and {os.getloadavg()[0]:.1f} at "
             "the end (the machine is shared: wall times carry that load, the ratios less so).", "",
             f"**Trace:** `{trace.name}` ({man.get('model', '?')} on {man.get('gpu', '?')}, {man.get('steps', '?')} "
             f"steps): {trace.stat().st_size / 1e6:.1f} MB gzip, **{size / 1e6:.1f} MB of JSON**.", "",
             "| command | status | wall s | peak RSS MiB (all processes) | TraceLens time / ours | TraceLens RSS / ours |",
             "| --- | --- | ---: | ---: | ---: | ---: |"]
    for k, label in (("timeline", "`ai4s-graph trace timeline --json`"), ("run", "`ai4s-graph run` (whole graph)"),
                     ("tracelens", "TraceLens `generate_perf_report_pytorch`")):
        r = res[k]
        lines.append(f"| {label} | {r['status']} | {r['wall_s']:.1f} | {mib(r['peak_rss'])} | "
                     f"{ratio(k, 'wall_s') if k != 'tracelens' else '1'} | "
                     f"{ratio(k, 'peak_rss') if k != 'tracelens' else '1'} |")
    lines += ["", "Targets (issue 12) and what this run gives:", ""]
    t_ok = lambda k, x: (res[k]["status"] == "ok" and res["tracelens"]["status"] == "ok"  # noqa: E731
                         and res["tracelens"]["wall_s"] / res[k]["wall_s"] >= x)
    lines.append(f"- `trace timeline` >= 10x faster than TraceLens: {'met' if t_ok('timeline', 10) else 'NOT met'} "
                 f"({ratio('timeline', 'wall_s')})")
    lines.append(f"- `run` >= 5x faster than TraceLens: {'met' if t_ok('run', 5) else 'NOT met'} ({ratio('run', 'wall_s')})")
    for k in ("timeline", "run"):
        ok = res[k]["status"] == "ok" and res[k]["peak_rss"] <= size
        lines.append(f"- peak RSS of `{k}` (summed over its processes) <= JSON size ({size / 2**20:.0f} MiB): "
                     f"{'met' if ok else 'NOT met'} ({mib(res[k]['peak_rss'])} MiB)")
    if diff_pct is not None:
        lines.append(f"- timeline rows equal to TraceLens's within 0.1% of total time: "
                     f"{'met' if diff_pct <= 0.1 else 'NOT met'} (largest difference {diff_pct:.2g}% of total)")
        lines += ["", "| row | ours ms | TraceLens ms |", "| --- | ---: | ---: |"]
        lines += [f"| {k} | {ours[k]['time_ms']:.3f} | {tl_rows[k]:.3f} |" for k in ROWS]
    else:
        lines.append("- timeline rows vs TraceLens: not compared (a command failed)")
    if run_status:
        lines += ["", "`run`'s STATUS lines:", "", "```"] + run_status[-12:] + ["```"]
    lines += ["", END]
    text = "\n".join(lines) + "\n"
    print(text)
    if a.results:
        replace_block(a.results, BEGIN, END, text)
    if a.readme:
        w = lambda k: f"{res[k]['wall_s']:.1f} s"  # noqa: E731
        rows = [README_BEGIN,
                f"| command (`{trace.name}`, {size / 1e6:.0f} MB of JSON; commit `{rev}`, load average {load0:.1f}) "
                "| wall | peak RSS, all processes |", "|---|---|---|",
                f"| `ai4s-graph trace timeline` | {w('timeline')} ({ratio('timeline', 'wall_s')} faster than TraceLens) "
                f"| {mib(res['timeline']['peak_rss'])} MiB ({ratio('timeline', 'peak_rss')} less) |",
                f"| `ai4s-graph run` (whole graph, the verifier's reader included) | {w('run')} "
                f"({ratio('run', 'wall_s')} faster) | {mib(res['run']['peak_rss'])} MiB ({ratio('run', 'peak_rss')} less) |",
                f"| TraceLens `generate_perf_report_pytorch` | {w('tracelens')} | {mib(res['tracelens']['peak_rss'])} MiB |",
                README_END]
        replace_block(a.readme, README_BEGIN, README_END, "\n".join(rows) + "\n")


if __name__ == "__main__":
    main()
