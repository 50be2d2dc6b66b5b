"""Cluster acceptance evaluation (seed 003, "evaluate-cluster"): run the measurements of
:mod:`ai4s_graph.tools.cluster.gpu_bench` on every node given, and write the dated markdown report that follows
seed 003's report rules, checked by :mod:`ai4s_graph.tools.cluster.report_check`.

Measurements are torch / NVML / fio (``gpu_bench.py``); this module only orchestrates:

- one node that is this host: ``gpu_bench.run_eval`` in-process;
- other nodes: ``srun -N1 -w <node> python3 gpu_bench.py eval`` per node (the SLURM allocation
  must already hold them), and with two or more nodes an inter-node all-reduce with
  ``srun --ntasks-per-node=<GPUs>`` across all of them (seed 003: every node given);
- ``--from-json``: a result already measured elsewhere (the H200 device run) -> report only.

The report itself is :mod:`ai4s_graph.tools.cluster.report_build` + ``templates/eval_report.md.j2``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import re
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from . import gpu_bench
from ...state.publish import publish
from ..errors import InputError, ToolUnavailableError
from ..perfmodel.datasheet import gpu_key
from .report_build import build_report, collective_sweeps, has_nvlink, official_tflops  # noqa: F401  (re-exported)
from .report_check import Violation, check_report

# ----------------------------------------------------------------------------------------------
# orchestration
# ----------------------------------------------------------------------------------------------


def eval_args(local_dir: str = "/tmp", shared_dirs: list[str] | None = None, fio: str | None = None,
              fio_sizes: str = "16KiB,1MiB,1GiB", fio_runtime: int = 180, fio_jobs: int = 16,
              mamf_dims: str = "2048,4096,6144,8192,10240,12288,14336,16384", mamf_budget: float = 120.0,
              msmf_seconds: float = 10.0, ar_max: str = "4GiB", dcgm_level: int = 2) -> list[str]:
    """The ``gpu_bench.py eval`` argument list for these options (shared by local and srun)."""
    a = ["--local-dir", local_dir, "--fio-sizes", fio_sizes, "--fio-runtime", str(fio_runtime),
         "--fio-jobs", str(fio_jobs), "--mamf-dims", mamf_dims, "--mamf-budget", str(mamf_budget),
         "--msmf-seconds", str(msmf_seconds), "--ar-max", ar_max, "--dcgm-level", str(dcgm_level)]
    for s in shared_dirs or []:
        a += ["--shared-dir", s]
    if fio:
        a += ["--fio", fio]
    return a


def is_this_host(node: str) -> bool:
    """True when ``node`` names this machine (short hostname, FQDN, localhost)."""
    me = socket.gethostname()
    return node in ("localhost", "127.0.0.1", me, me.split(".")[0])


def measure_node(node: str, argv: list[str], timeout_s: float = 7200) -> dict[str, Any]:
    """Every eval measurement on ``node``: in-process for this host, else through ``srun``.
    Raises ToolUnavailableError when a remote node is given and ``srun`` is missing."""
    if is_this_host(node):
        ns = _eval_namespace(argv)
        return gpu_bench.run_eval(ns)
    if not shutil.which("srun"):
        raise ToolUnavailableError(f"node {node} is not this host and srun is not installed")
    cmd = ["srun", "-N1", "-n1", "-w", node, sys.executable, gpu_bench.__file__, "eval", "--json", "-"] + argv
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    if p.returncode != 0:
        raise InputError(f"srun on {node} failed (rc {p.returncode}): {(p.stderr or p.stdout).strip()[-200:]}")
    return json.loads(p.stdout[p.stdout.index("{"):])


def _eval_namespace(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("--local-dir", default="/tmp")
    ap.add_argument("--shared-dir", action="append", default=[])
    ap.add_argument("--fio", default=None)
    ap.add_argument("--fio-sizes", default=",".join(gpu_bench.FIO_SIZES))
    ap.add_argument("--fio-runtime", type=int, default=180)
    ap.add_argument("--fio-jobs", type=int, default=16)
    ap.add_argument("--mamf-dims", default="2048,4096,6144,8192,10240,12288,14336,16384")
    ap.add_argument("--mamf-iters", type=int, default=10)
    ap.add_argument("--mamf-budget", type=float, default=120.0)
    ap.add_argument("--msmf-candidates", type=int, default=3)
    ap.add_argument("--msmf-min-dim", type=int, default=8192)
    ap.add_argument("--msmf-seconds", type=float, default=10.0)
    ap.add_argument("--ar-max", default="4GiB")
    ap.add_argument("--dcgm-level", type=int, default=2)
    return ap.parse_args(argv)


def inter_node_allreduce(nodes: list[str], gpus_per_node: int, ar_max: str = "4GiB", port: int = 29511,
                         timeout_s: float = 1800) -> dict[str, Any]:
    """All-reduce across every given node (``NNODES x GPUs`` ranks, seed 003) with ``srun``;
    rank 0's rows. Raises ToolUnavailableError without srun, InputError when the run fails."""
    if not shutil.which("srun"):
        raise ToolUnavailableError("inter-node all-reduce needs srun, which is not installed")
    env = dict(os.environ, MASTER_ADDR=nodes[0], MASTER_PORT=str(port))
    env.setdefault("NCCL_NVLS_ENABLE", "2")  # seed 003: preset 2 (auto) only when the platform set nothing
    cmd = ["srun", f"-N{len(nodes)}", f"--ntasks-per-node={gpus_per_node}", "-w", ",".join(nodes),
           sys.executable, gpu_bench.__file__, "allreduce", "--json", "-", "--ar-max", ar_max]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env)
    if p.returncode != 0:
        raise InputError(f"inter-node all-reduce failed (rc {p.returncode}): {(p.stderr or p.stdout).strip()[-200:]}")
    return json.loads(p.stdout[p.stdout.index("{"):])


def busbw_plot(rows: list[dict[str, Any]] | dict[str, list[dict[str, Any]]], path: str | Path, title: str) -> Path:
    """busbw (GB/s) against payload (bytes, log-x), saved as PNG at ``path`` (matplotlib, Agg).
    ``rows`` is one sweep or ``{label: rows}`` for one line per variant (NVLink, P2P disabled)."""
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, ax = plt.subplots(figsize=(6, 3.5))
    series = rows if isinstance(rows, dict) else {"": rows}
    for label, rs in series.items():
        ax.plot([r["bytes"] for r in rs], [r["busbw_gbps"] for r in rs], marker="o", label=label or None)
    if len(series) > 1:
        ax.legend()
    ax.set_xscale("log", base=2)
    ax.set_xlabel("payload (bytes)")
    ax.set_ylabel("busbw (GB/s)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    p = Path(path)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    return publish(p, buf.getbuffer())  # atomic; refuses a link


def report_stamp(nodes: list[dict[str, Any]], date: str) -> str:
    """``<date>-<HHMM>Z`` for the report and raw-directory names (seed 003: ``reports/<gpu>-<datetime>.md``,
    e.g. ``h200-2026-09-17-1938Z.md``): the time is the first node's ``env.datetime_utc`` when it
    falls on ``date`` (``YYYY-MM-DD``), else ``0000``."""
    dt = str(nodes[0].get("env", {}).get("datetime_utc") or "")
    m = re.match(r"(\d{4}-\d{2}-\d{2})T(\d{2}):(\d{2})", dt)
    return f"{date}-{m.group(2)}{m.group(3)}Z" if m and m.group(1) == date else f"{date}-0000Z"


def report_name(nodes: list[dict[str, Any]], date: str) -> str:
    """``<gpu>-<date>-<HHMM>Z.md``; ``<gpu>`` is the datasheet key (``h200``, ``mi300x``) or the
    device name's last word, ``cpu`` without a GPU."""
    gpus = nodes[0]["env"].get("gpus") or []
    if not gpus:
        tag = "cpu"
    else:
        tag = (gpu_key(gpus[0]["name"]) or re.sub(r"[^a-z0-9]+", "", gpus[0]["name"].split()[-1].lower()) or "gpu").lower()
    return f"{tag}-{report_stamp(nodes, date)}.md"


def write_report(nodes: list[dict[str, Any]], reports_dir: str | Path, *, date: str, access: str,
                 inter: dict[str, Any] | None = None, extra_gaps: list[str] | None = None,
                 nccl_env_source: str = "the environment the benchmarks ran in", name: str | None = None,
                 save_raw: bool = True, raw_dir: str | None = None) -> tuple[Path, list[Violation]]:
    """Write ``<reports_dir>/<name or report_name()>`` and (``save_raw``) the results JSON and
    plots into ``<reports_dir>/<raw_dir or raw-<date>-<HHMM>Z>/``; run the checker on the written
    text (the file-name rule included). Returns (report path, violations)."""
    rd = Path(reports_dir)
    raw = raw_dir or f"raw-{report_stamp(nodes, date)}"
    (rd / raw).mkdir(parents=True, exist_ok=True)
    if save_raw:
        for n in nodes:
            publish(rd / raw / f"eval-{n['node']}.json", json.dumps(n, indent=1, default=str) + "\n", root=rd)
        if inter:
            publish(rd / raw / "allreduce-inter.json", json.dumps(inter, indent=1) + "\n", root=rd)
    net0 = nodes[0].get("network") or {}
    intra = net0.get("intra") or {}
    colls = collective_sweeps(net0, nvlink=has_nvlink(nodes[0]["env"].get("topo")))
    for c in colls:
        busbw_plot({v.get("variant", "default"): v["rows"] for v in c["variants"]}, rd / raw / f"busbw-{c['collective']}.png",
                   f"intra-node {c['collective'].replace('_', '-')}, {c['variants'][0].get('ranks')} ranks")
    if intra.get("rows") and not colls:
        busbw_plot(intra["rows"], rd / raw / "busbw-intra.png", f"intra-node all-reduce, {intra['ranks']} ranks")
    if inter and inter.get("rows"):
        busbw_plot(inter["rows"], rd / raw / "busbw-inter.png", f"inter-node all-reduce, {inter['ranks']} ranks")
    text = build_report(nodes, raw_dir=raw, access=access, inter=inter, extra_gaps=extra_gaps, nccl_env_source=nccl_env_source)
    path = publish(rd / (name or report_name(nodes, date)), text)
    if save_raw:
        inputs = {"report": path.name, "nodes": [f"eval-{n['node']}.json" for n in nodes],
                  "inter": "allreduce-inter.json" if inter else None, "access": access, "extra_gaps": list(extra_gaps or []),
                  "nccl_env_source": nccl_env_source}
        publish(rd / raw / REPORT_INPUTS, json.dumps(inputs, indent=1) + "\n", root=rd)
    return path, check_report(text, filename=path.name)


REPORT_INPUTS = "report-inputs.json"
"""Beside the raw results: the builder's inputs (result files, access, extra gaps, who set the NCCL
environment), so the report can be rebuilt from ``raw-<datetime>/`` alone (:func:`rebuild_report`)."""


def rebuild_report(raw_dir: str | Path) -> tuple[str, str]:
    """``(report file name, text)`` of the report built again from ``raw_dir`` (its
    :data:`REPORT_INPUTS` and the result files it names). Raises InputError when the inputs file
    or a result it names is missing or not JSON."""
    raw = Path(raw_dir)
    inp = _read_json(raw / REPORT_INPUTS, f"no {REPORT_INPUTS} in {raw}: the report cannot be rebuilt from it")
    nodes = load_results([raw / f for f in inp["nodes"]])
    inter = json.loads((raw / inp["inter"]).read_text()) if inp.get("inter") else None
    text = build_report(nodes, raw_dir=raw.name, access=inp["access"], inter=inter, extra_gaps=inp.get("extra_gaps") or [],
                        nccl_env_source=inp["nccl_env_source"])
    return inp["report"], text


def _read_json(p: Path, missing: str) -> dict[str, Any]:
    """The JSON object in ``p``. Raises InputError with ``missing`` when there is no file, or
    naming the file when it is not JSON."""
    if not p.is_file():
        raise InputError(missing)
    try:
        return json.loads(p.read_text())
    except ValueError as e:
        raise InputError(f"{p}: not JSON ({e})") from e


def load_results(paths: list[str | Path]) -> list[dict[str, Any]]:
    """Read eval-result JSON files (``gpu_bench.py eval --json``). Raises InputError when one is
    missing, not JSON, or not an eval result."""
    out = []
    for p in paths:
        d = _read_json(Path(p), f"no eval result at {p}")
        if d.get("kind") != "eval":
            raise InputError(f"{p}: not a gpu_bench eval result (kind={d.get('kind')!r})")
        out.append(d)
    return out
