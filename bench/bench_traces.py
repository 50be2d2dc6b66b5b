"""Benchmark: ai4s-graph's multi-rank trace analysis against TraceLens and HolisticTraceAnalysis.

For each case (trace size x ranks) the traces are made by bench/make_traces.py in a scratch
directory, then each tool runs in a fresh child process on the same files:

* ``ai4s``: ``collectives.analyze_collectives(files, workers=W)`` — per-rank streaming analysis
  (tools/trace_stream.py) in a process pool of W workers, then the cross-rank report (cold cache);
* ``ai4s-warm``: the same call again with the cache filled (a resumed / re-run graph);
* ``hta``: ``TraceAnalysis(trace_files={rank: path}).get_temporal_breakdown()`` (traceinsight);
* ``tracelens``: ``generate_perf_report_pytorch(path)`` for each rank in turn (only if
  ``import TraceLens`` works, optionally from ``--tracelens-path``/``$AI4S_TRACELENS_PATH``).

Wall time is the child's; peak RSS is the peak of the summed RSS of the child and all its
descendants (pool workers included), sampled every 20 ms with psutil, cross-checked with the
child's own ``ru_maxrss``. One table is printed (rich); ``--json``/``--markdown`` save it.
This is a benchmark, not a test: nothing here asserts a speed.

    python bench/bench_traces.py --scratch /tmp/ai4s-bench --markdown /tmp/ai4s-bench/table.md
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

DEFAULT_CASES = ["10x1", "10x8", "10x64", "100x1", "100x8", "1000x1"]
TOOLS = ["ai4s", "ai4s-warm", "hta", "tracelens"]


def _one(tool: str, files: dict[int, str], cache_dir: str, workers: int) -> dict:
    """Run one tool in this (child) process; returns a small summary of what it computed."""
    if tool in ("ai4s", "ai4s-warm"):
        from ai4s_graph.tools.trace import collectives

        rep = collectives.analyze_collectives(files, cache_dir=cache_dir, workers=workers)
        return {"ranks": len(rep.per_rank), "idle_pct_rank0": round(rep.per_rank[0].idle_pct, 3),
                "collectives_matched": rep.n_collectives_matched}
    if tool == "hta":
        os.environ["HTA_DISABLE_NS_ROUNDING"] = "1"
        from hta.trace_analysis import TraceAnalysis

        ta = TraceAnalysis(trace_files=files, trace_dir=str(Path(next(iter(files.values()))).parent))
        tb = ta.get_temporal_breakdown(visualize=False)
        return {"ranks": len(tb), "idle_pct_rank0": float(tb["idle_time_pctg"].iloc[0])}
    if tool == "tracelens":
        from TraceLens.Reporting.generate_perf_report_pytorch import generate_perf_report_pytorch

        out = None
        with tempfile.TemporaryDirectory() as td:
            for r, p in sorted(files.items()):
                dfs = generate_perf_report_pytorch(p, output_csvs_dir=os.path.join(td, str(r)))
                if out is None:
                    g = dfs["gpu_timeline"]
                    out = float(g.loc[g["type"] == "idle_time", "percent"].iloc[0])
        return {"ranks": len(files), "idle_pct_rank0": round(out, 3)}
    raise SystemExit(f"unknown tool {tool}")


def _tree_mem(proc: psutil.Process, what: str = "rss") -> int:
    """Summed ``what`` (bytes: ``rss`` from statm, ``pss`` from ``/proc/<pid>/smaps_rollup``) of ``proc``
    and its descendants; a process gone or unreadable counts 0."""
    total = 0
    try:
        procs = [proc] + proc.children(recursive=True)
    except psutil.Error:
        return 0
    for p in procs:
        try:
            total += p.memory_info().rss if what == "rss" else getattr(p.memory_full_info(), what)
        except (psutil.Error, AttributeError):
            pass
    return total


def _tree_rss(proc: psutil.Process) -> int:
    return _tree_mem(proc, "rss")


def measure(tool: str, files: dict[int, str], cache_dir: str, workers: int, timeout_s: float,
            extra_path: str | None) -> dict:
    """Run ``tool`` in a child process; wall time (s), peak tree RSS (bytes), its summary."""
    spec = Path(tempfile.mkstemp(suffix=".json")[1])
    spec.write_text(json.dumps({"tool": tool, "files": files, "cache_dir": cache_dir, "workers": workers}))
    env = dict(os.environ)
    paths = [str(HERE.parent)] + ([extra_path] if extra_path else []) + [env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)  # repo root: ai4s_graph importable
    t0 = time.perf_counter()
    # the tools print a lot: send it to files, a full pipe would block the child
    log_out = tempfile.TemporaryFile(mode="w+")
    log_err = tempfile.TemporaryFile(mode="w+")
    child = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--one", str(spec)],
                             stdout=log_out, stderr=log_err, env=env, text=True)
    ps = psutil.Process(child.pid)
    peak = 0
    status = "ok"
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
    log_out.seek(0)
    log_err.seek(0)
    out, err = log_out.read(), log_err.read()
    wall = time.perf_counter() - t0
    spec.unlink(missing_ok=True)
    res = {"tool": tool, "status": status, "wall_s": wall, "peak_rss": peak}
    if status == "ok":
        if child.returncode != 0:
            res["status"] = "error: " + (err.strip().splitlines() or ["?"])[-1][:160]
        else:
            line = [ln for ln in out.splitlines() if ln.startswith("RESULT ")][-1]
            r = json.loads(line[len("RESULT "):])
            res.update(summary=r["summary"], wall_s=r["wall_s"], ru_maxrss=r["ru_maxrss"])
            res["peak_rss"] = max(peak, r["ru_maxrss"])
    return res


def _child(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    files = {int(k): v for k, v in spec["files"].items()}
    t0 = time.perf_counter()
    summary = _one(spec["tool"], files, spec["cache_dir"], spec["workers"])
    wall = time.perf_counter() - t0
    self_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print("RESULT " + json.dumps({"summary": summary, "wall_s": wall, "ru_maxrss": self_rss}))


def _tracelens_importable(extra: str | None) -> bool:
    env = dict(os.environ)
    if extra:
        env["PYTHONPATH"] = extra + os.pathsep + env.get("PYTHONPATH", "")
    code = "from TraceLens.Reporting.generate_perf_report_pytorch import generate_perf_report_pytorch"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True).returncode == 0


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for ln in Path("/proc/cpuinfo").read_text().splitlines():
            if ln.startswith("model name"):
                cpu = ln.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (f"{os.cpu_count()} cores ({cpu}), {psutil.virtual_memory().total / 2**30:.1f} GiB RAM, "
            f"Python {platform.python_version()}, {platform.system()} {platform.release()}")


def main() -> None:
    ap = argparse.ArgumentParser(description="ai4s-graph trace-analysis benchmark")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--scratch", default=os.path.join(tempfile.gettempdir(), "ai4s-bench"))
    ap.add_argument("--cases", nargs="*", default=DEFAULT_CASES, help="SIZEMBxRANKS, e.g. 10x64")
    ap.add_argument("--tools", nargs="*", default=TOOLS)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--timeout", type=float, default=300.0, help="per tool run, s")
    ap.add_argument("--skip", nargs="*", default=["1000x1:hta", "1000x1:tracelens", "100x8:tracelens"],
                    help="CASE:TOOL pairs not to run (too slow / too big for the machine)")
    ap.add_argument("--tracelens-path", default=os.environ.get("AI4S_TRACELENS_PATH"))
    ap.add_argument("--json")
    ap.add_argument("--markdown")
    a = ap.parse_args()
    if a.one:
        _child(a.one)
        return

    from rich.console import Console
    from rich.table import Table

    import make_traces

    console = Console()
    tools = list(a.tools)
    if "tracelens" in tools and not _tracelens_importable(a.tracelens_path):
        console.print("TraceLens not importable: its column is skipped")
        tools.remove("tracelens")
    rows = []
    for case in a.cases:
        size_mb, ranks = (float(x) for x in case.split("x"))
        ranks = int(ranks)
        d = Path(a.scratch) / f"{case}"
        t0 = time.perf_counter()
        files = make_traces.make_set(d, size_mb=size_mb, ranks=ranks)
        nbytes = sum(Path(p).stat().st_size for p in files.values())
        console.print(f"[bold]{case}[/]: {ranks} x {nbytes / ranks / 1e6:.0f} MB traces ready "
                      f"({time.perf_counter() - t0:.0f} s)")
        cache_dir = tempfile.mkdtemp(prefix="ai4s-bench-cache-")
        results = {}
        for tool in tools:
            if f"{case}:{tool}" in a.skip:
                results[tool] = {"tool": tool, "status": "skipped"}
                continue
            r = measure(tool, files, cache_dir, a.workers, a.timeout, a.tracelens_path)
            results[tool] = r
            console.print(f"  {tool:10s} {r['status']:8s} {r.get('wall_s', 0):8.1f} s "
                          f"{r.get('peak_rss', 0) / 2**20:9.0f} MiB  {r.get('summary', '')}")
        rows.append({"case": case, "ranks": ranks, "mb_per_rank": nbytes / ranks / 1e6, "results": results})

    table = Table(title=f"Trace analysis: wall time and peak RSS ({machine()})")
    for col in ("case", "MB/rank", "tool", "wall s", "peak RSS MiB", "ai4s time ratio", "ai4s RSS ratio"):
        table.add_column(col, justify="right" if col not in ("case", "tool") else "left")
    md = ["| case (MB/rank x ranks) | tool | wall s | peak RSS MiB | tool time / ai4s time | tool RSS / ai4s RSS |",
          "| --- | --- | ---: | ---: | ---: | ---: |"]
    for row in rows:
        base = row["results"].get("ai4s", {})
        for tool, r in row["results"].items():
            ok = r["status"] == "ok"
            wall = f"{r['wall_s']:.1f}" if ok else r["status"]
            rss = f"{r['peak_rss'] / 2**20:.0f}" if ok else "-"
            if ok and base.get("status") == "ok" and tool != "ai4s":
                tr = f"{r['wall_s'] / base['wall_s']:.2f}x"
                mr = f"{r['peak_rss'] / base['peak_rss']:.2f}x"
            else:
                tr = mr = "-"
            table.add_row(row["case"], f"{row['mb_per_rank']:.0f}", tool, wall, rss, tr, mr)
            md.append(f"| {row['case']} | {tool} | {wall} | {rss} | {tr} | {mr} |")
    console.print(table)
    if a.json:
        Path(a.json).write_text(json.dumps({"machine": machine(), "rows": rows}, indent=1))
    if a.markdown:
        Path(a.markdown).write_text(f"Machine: {machine()}\n\n" + "\n".join(md) + "\n")


if __name__ == "__main__":
    main()
