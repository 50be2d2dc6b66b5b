"""Cluster acceptance evaluation (seed 003, "evaluate-cluster"): run the measurements of
:mod:`ai4s_graph.tools.cluster.gpu_bench` on every node given, and write the dated markdown report that follows
seed 003's report rules, checked by :mod:`ai4s_graph.tools.cluster.report_check`.

Measurements are torch / NVML / fio (``gpu_bench.py``); this module only orchestrates:

- one node that is this host: ``gpu_bench.run_eval`` in-process;
- other nodes: ``srun -N1 -w <node> python3 gpu_bench.py eval`` per node (the SLURM allocation
  must already hold them), and with two or more nodes an inter-node all-reduce with
  ``srun --ntasks-per-node=<GPUs>`` across all of them (seed 003: every node given);
- ``--from-json``: a result already measured elsewhere (the H200 device run) -> report only.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

from . import gpu_bench
from ..errors import InputError, ToolUnavailableError
from .report_check import Violation, check_report

ML_ENG = "https://github.com/stas00/ml-engineering/blob/master"
TFLOPS_TABLE = f"{ML_ENG}/compute/accelerator/README.md#tflops-comparison-table"

OFFICIAL_BF16_TFLOPS: dict[str, tuple[float, str]] = {
    "H100": (989.0, "NVIDIA H100 SXM datasheet, dense BF16 (1979 TFLOPS with sparsity)"),
    "H200": (989.0, "NVIDIA H200 SXM datasheet, dense BF16 (1979 TFLOPS with sparsity)"),
    "A100": (312.0, "NVIDIA A100 datasheet, dense BF16"),
    "MI300X": (1307.4, "AMD Instinct MI300X datasheet, dense BF16"),
    "MI250X": (383.0, "AMD Instinct MI250X datasheet, dense BF16"),
}
"""Official dense BF16 peaks by GPU family (vendor datasheets; the same figures as the
[TFLOPS comparison table] seed 003 links). Unknown GPUs get no % spec column."""


def official_tflops(name: str) -> tuple[float | None, str]:
    """(dense BF16 TFLOPS, source) for a GPU name like ``NVIDIA H200``; (None, "") if unknown.
    The PCIe/NVL H100 and H200 variants have other peaks, so only plain SXM names match."""
    up = name.upper()
    if any(x in up for x in ("PCIE", "NVL")):
        return None, ""
    for fam, (v, src) in OFFICIAL_BF16_TFLOPS.items():
        if fam in up.replace(" ", ""):
            return v, src
    return None, ""


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


# ----------------------------------------------------------------------------------------------
# report
# ----------------------------------------------------------------------------------------------


def _gib(nbytes: float) -> str:
    return f"{nbytes / (1 << 30):.1f} GiB"


def _size(nbytes: float) -> str:
    for unit, m in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20)):
        if nbytes >= m:
            v = nbytes / m
            return f"{v:.0f} {unit}" if v >= 10 else f"{v:.1f} {unit}"
    return f"{nbytes:.0f} B"


def _bw(v: float, grouped: bool) -> str:
    return f"{v:_.1f}" if grouped else f"{v:.1f}"


def _pct(v: float, ref: float) -> str:
    return f"{100 * v / ref:.1f}%"


def _gpu_label(host: str, idx: int, g: int) -> str:
    return f"`{host}(node{idx}):gpu{g}`"


def build_report(nodes: list[dict[str, Any]], *, raw_dir: str, access: str, inter: dict[str, Any] | None = None,
                 extra_gaps: list[str] | None = None, nccl_env_source: str = "the environment the benchmarks ran in") -> str:
    """The markdown report for the per-node eval results ``nodes`` (``gpu_bench.run_eval``
    dicts, in the order the nodes were given) and the optional inter-node all-reduce ``inter``.

    ``raw_dir`` is the relative raw-artifact directory (``raw-<date>``); ``access`` says how
    commands reached the nodes; ``extra_gaps`` are ``"compute: ..."`` / ``"network: ..."`` /
    ``"storage: ..."`` lines the caller knows about; ``nccl_env_source`` names who set the NCCL
    variables. Raises InputError when ``nodes`` is empty or not eval results."""
    if not nodes or any(n.get("kind") != "eval" for n in nodes):
        raise InputError("build_report needs at least one gpu_bench eval result (kind 'eval')")
    n0 = nodes[0]
    env = n0["env"]
    gpus = env.get("gpus") or []
    ngpu = len(gpus)
    gname = gpus[0]["name"] if gpus else "CPU-only"
    short = gname.replace("NVIDIA ", "").replace("AMD ", "")
    spec, spec_src = official_tflops(gname) if gpus else (None, "")
    gaps: dict[str, list[str]] = {"compute": [], "network": [], "storage": []}
    for n in nodes:
        for g in n.get("gaps", []):
            sec, _, msg = g.partition(": ")
            gaps.setdefault(sec, []).append(msg if len(nodes) == 1 else f"{n['node']}: {msg}")
    intra0 = (n0.get("network") or {}).get("intra") or {}
    if intra0.get("skipped"):
        gaps["network"].append(f"Intra-node all-reduce benchmark: {intra0['skipped']}, so it did not run")
    dcgm = (n0.get("compute") or {}).get("dcgm") or {}
    if gpus and not dcgm.get("ran"):
        gaps["compute"].insert(0, "Hardware health: `dcgmi diag -r 2` (DCGM, NVIDIA Data Center GPU Manager, which checks GPU "
                               f"memory, memory bandwidth and PCIe) did not run: {dcgm.get('reason', 'it was not part of this run')}")
    for g in extra_gaps or []:
        sec, _, msg = g.partition(": ")
        gaps.setdefault(sec, []).append(msg)
    hosts = [n["node"] for n in nodes]
    L: list[str] = []
    w = L.append
    title_gpu = f"{ngpu}× {short}" if ngpu else "CPU-only"
    w(f"# Cluster eval: {len(nodes)} node{'s' if len(nodes) > 1 else ''} of {title_gpu}")
    w("")
    w(f"- Datetime (UTC): {env['datetime_utc']}")
    w(f"- Access: {access}")
    w("- Nodes / GPUs: " + ", ".join(f"`{h}` (node{i})" for i, h in enumerate(hosts)) + f"; {ngpu} GPU{'s' if ngpu != 1 else ''} per node")
    w("")
    w(f"Raw logs: [`{raw_dir}/`]({raw_dir}/).")
    w("")

    comp = n0.get("compute", {})
    mamf = comp.get("mamf")
    msmf = comp.get("msmf")
    lemon = comp.get("lemon")
    intra = (n0.get("network") or {}).get("intra") or {}
    intra_ran = bool(intra.get("rows"))
    inter_ran = bool(inter and inter.get("rows")) and len(nodes) > 1
    st = n0.get("storage") or {}
    local = [r for r in st.get("local", []) if r.get("rows")]
    shared = [r for r in st.get("shared", []) if r.get("rows")]
    if any(r.get("error") for r in st.get("shared", [])) or not st.get("shared"):
        if not st.get("shared"):
            gaps["storage"].append("no shared network filesystem was given for this eval, so only the local disk was scanned")

    # ---- TOC
    w("## Table of Contents")
    w("")
    w("1. [Environment](#environment) — host, GPU, fabric, filesystems, software (inventory, not a bench)")
    k = 2
    if mamf or lemon:
        w(f"{k}. [Compute](#compute)")
        j = 1
        if ((n0.get("compute") or {}).get("dcgm") or {}).get("ran"):
            w(f"   {j}. [Hardware health](#hardware-health) — `dcgmi diag -r 2`")
            j += 1
        if msmf or mamf:
            w(f"   {j}. [GPU performance benchmarks](#gpu-performance-benchmarks) — `gpu_bench.py` matmul shape search on GPU0, then a sustained matmul on every GPU")
            j += 1
        if lemon:
            w(f"   {j}. [Find underperforming GPUs](#find-underperforming-gpus) — fixed 16384³ `matmul` on every GPU")
        k += 1
    if intra_ran or inter_ran:
        w(f"{k}. [Network](#network)")
        j = 1
        if intra_ran:
            w(f"   {j}. [Intra-node all-reduce benchmark](#intra-node-all-reduce-benchmark) — `gpu_bench.py`, {intra['ranks']} ranks")
            j += 1
        if inter_ran:
            w(f"   {j}. [Inter-node all-reduce benchmark](#inter-node-all-reduce-benchmark) — `gpu_bench.py`, {inter['ranks']} ranks")
        k += 1
    elif gaps["network"]:
        w(f"{k}. [Network](#network)")
        k += 1
    w(f"{k}. [Storage](#storage)")
    w("   1. [Existing Partitions](#existing-partitions) — mount inventory")
    j = 2
    if local:
        w(f"   {j}. [Local disk IO benchmark](#local-disk-io-benchmark) — `fio` on `{local[0]['path']}`")
        j += 1
    for r in shared:
        h = _shared_heading(r)
        w(f"   {j}. [{h}](#{_slug(h)}) — `fio` on `{r['path']}`")
        j += 1
    k += 1
    healthy, under, operator = _findings(nodes, spec, local, shared, inter if inter_ran else None)
    w(f"{k}. [Findings](#findings)")
    j = 1
    for name, items in (("Healthy subsystems", healthy), ("Underperforming subsystems", under), ("Needs operator input", operator)):
        if items:
            w(f"   {j}. [{name}](#{_slug(name)})")
            j += 1
    w("")

    # ---- Environment
    w("## Environment")
    w("")
    w("### Host")
    w("")
    w("| field | value |")
    w("| --- | --- |")
    w(f"| OS | {env.get('os', '')} |")
    w(f"| hostname | " + ", ".join(f"`{h}`" for h in hosts) + " |")
    w(f"| kernel | {env.get('kernel', '')} |")
    w(f"| CPU cores / NUMA (non-uniform memory access) domains | {env.get('nproc')} cores ({env.get('cpu_model', '')}) / {env.get('numa_nodes')} |")
    if env.get("mem_total_bytes"):
        w(f"| host RAM | {_gib(env['mem_total_bytes'])} |")
    if gpus and gpus[0].get("pcie_gen_max"):
        w(f"| PCIe to each GPU | Gen{gpus[0]['pcie_gen_max']} ×{gpus[0].get('pcie_width_max', '?')} |")
    w("")
    w("### GPU")
    w("")
    if gpus:
        g0 = gpus[0]
        sat = _saturated_mhz(msmf)
        w("| field | value |")
        w("| --- | --- |")
        w(f"| GPU × count per node | {gname} × {ngpu} |")
        w(f"| compute capability / SM (streaming multiprocessor) count | {g0.get('capability')} / {g0.get('sm_count')} |")
        w(f"| HBM (high-bandwidth memory) | {_gib(g0['memory_total_bytes'])} |")
        w(f"| driver / CUDA | {g0.get('driver', '')} / {env.get('cuda') or env.get('hip')} |")
        clocks = [f"boost {g0['max_sm_mhz']:.0f} MHz" if g0.get("max_sm_mhz") else None,
                  f"saturated {sat} MHz (dense matmul at the power limit)" if sat else None,
                  f"parked idle {g0['idle_sm_mhz']:.0f} MHz" if g0.get("idle_sm_mhz") else None]
        w(f"| SM clocks | {', '.join(c for c in clocks if c)} |")
        if g0.get("power_limit_w"):
            w(f"| power limit (TDP, thermal design power) / idle draw | {g0['power_limit_w']:.0f} W / {g0.get('idle_power_w', 0):.0f} W |")
    else:
        w("This node has no GPU visible to torch.")
    w("")
    w("### Fabric")
    w("")
    w("| link | inventory |")
    w("| --- | --- |")
    topo = env.get("topo") or ""
    nv = sorted({t for t in topo.split() if t.startswith("NV") and t[2:].isdigit()})
    if ngpu > 1:
        w(f"| intra-node | {'NVLink (' + ', '.join(nv) + ' in `nvidia-smi topo -m`)' if nv else 'PCIe (`nvidia-smi topo -m` shows no NVLink)'} |")
    else:
        w("| intra-node | one GPU per node, so no GPU-to-GPU link |")
    if env.get("ib_devices"):
        rates = ", ".join(f"{d['name']} {d['rate']}" for d in env["ib_devices"])
        w(f"| inter-node adapters | {rates} |")
    w("")
    w("### Filesystems")
    w("")
    w("| filesystem | value |")
    w("| --- | --- |")
    fs_local = (local[0]["fs"] if local else (env.get("filesystems") or [{}])[0])
    if fs_local:
        w(f"| Local | `{fs_local.get('mount')}`, {_size(fs_local.get('size_bytes', 0))} ({fs_local.get('type')}) |")
    for r in shared:
        w(f"| Shared network FS | `{r['fs'].get('mount')}`, {_size(r['fs'].get('size_bytes', 0))} ({r['fs'].get('type')}) |")
    w("")
    w("### Software")
    w("")
    w("| component | version |")
    w("| --- | --- |")
    w(f"| Python | {env.get('python')} |")
    w(f"| torch | {env.get('torch')} |")
    if env.get("nccl"):
        w(f"| NCCL (NVIDIA Collective Communications Library) | {env['nccl']} |")
    nccl_env = {k: v for k, v in (env.get("nccl_env") or {}).items()
                if k.startswith(("NCCL_", "FI_", "AWS_OFI")) and k != "NCCL_VERSION"}
    if nccl_env:
        w("| NCCL environment | " + ", ".join(f"`{k}={v}`" for k, v in nccl_env.items()) + " |")
    w("")

    # ---- Compute
    if mamf or lemon or gaps["compute"]:
        w("## Compute")
        w("")
        if gpus:
            w("### Introduction")
            w("")
            spec_txt = (f", official dense BF16 peak {spec:.0f} TFLOPS ({spec_src}; see the [TFLOPS comparison table]({TFLOPS_TABLE}))"
                        if spec else "")
            w(f"Each node has {ngpu}× {gname}: {gpus[0].get('sm_count')} SMs, {_gib(gpus[0]['memory_total_bytes'])} of HBM"
              + (f", TDP {gpus[0]['power_limit_w']:.0f} W" if gpus[0].get("power_limit_w") else "") + spec_txt + ".")
            w("")
            k = 1
            if mamf:
                w(f"{k}. `gpu_bench.py` matmul shape search — ai4s-graph's own torch script: times bf16 matrix multiplications of many "
                  "**matmul shapes** (M×N×K) on GPU0 and keeps the fastest, reading board power and SM clock through NVML "
                  "(NVIDIA Management Library) while each runs; then it runs the largest winners back to back for "
                  f"{msmf['seconds']:.0f} s each and measures the sustainable one on every GPU. It reports MAMF "
                  "(Maximum Achievable Matmul FLOPS) and MSMF (Maximum Sustainable Matmul FLOPS), both against the official peak.")
                k += 1
            if lemon:
                w(f"{k}. Lemon GEMM (General Matrix Multiply) — an inline script in `gpu_bench.py`: one fixed matmul shape "
                  "(M=N=K=16384, bf16) on every GPU, three passes, to catch a dead, slow, or throttled card.")
            w("")
        if dcgm.get("ran"):
            w("### Hardware health")
            w("")
            w("**Fail**: " + "; ".join(dcgm["failed"]) if dcgm.get("failed") else "**Pass**")
            w("")
        if mamf:
            _compute_perf(w, nodes, spec, gname)
        if lemon:
            _lemon(w, nodes)
        if gaps["compute"]:
            w("### Gaps")
            w("")
            for g in gaps["compute"]:
                w(f"- {g}")
            w("")

    # ---- Network
    if intra_ran or inter_ran or gaps["network"]:
        w("## Network")
        w("")
        if intra_ran or inter_ran:
            w("### Introduction")
            w("")
            w(f"1. `gpu_bench.py` all-reduce — ai4s-graph's own torch.distributed script, one process per GPU over NCCL: every rank "
              "ends up with the sum of all ranks' tensors. It sweeps bf16 payloads from 32 KiB upward (×8 per step), checks the sum, "
              "and reports busbw (bus bandwidth, what the fabric moves: algbw × 2(n-1)/n for n ranks) and algbw (algorithm "
              "bandwidth, payload bytes ÷ time, what the caller sees), in GB/s (10⁹ bytes per second).")
            nvls = (n0["env"].get("nccl_env") or {}).get("NCCL_NVLS_ENABLE")
            w("")
            w("NVLS (NVLink SHARP) performs the all-reduce inside the NVSwitch (typically ~30% above ring busbw intra-node, ~25% "
              "inter-node) and does not speed up other collectives. " + (
                  f"`NCCL_NVLS_ENABLE={nvls}` was set by {nccl_env_source}." if nvls is not None else
                  "`NCCL_NVLS_ENABLE` was unset, so NCCL chose (auto)."))
            w("")
        if intra_ran:
            w("### Intra-node all-reduce benchmark")
            w("")
            _ar_table(w, intra["rows"])
            if Path(raw_dir, "busbw-intra.png").name:
                w(f"![Intra-node all-reduce]({raw_dir}/busbw-intra.png)")
                w("")
        if inter_ran:
            w("### Inter-node all-reduce benchmark")
            w("")
            _ar_table(w, inter["rows"])
            w(f"![Inter-node all-reduce]({raw_dir}/busbw-inter.png)")
            w("")
        if gaps["network"]:
            w("### Gaps")
            w("")
            for g in gaps["network"]:
                w(f"- {g}")
            w("")

    # ---- Storage
    w("## Storage")
    w("")
    w("### Existing Partitions")
    w("")
    w("| mount | size | type | device / server |")
    w("| --- | ---: | --- | --- |")
    seen_src = set()
    rows_fs = [fs_local] + [r["fs"] for r in shared]
    for fs in rows_fs:
        if not fs or fs.get("source") in seen_src:
            continue
        seen_src.add(fs.get("source"))
        w(f"| `{fs.get('mount')}` | {_size(fs.get('size_bytes', 0))} | {fs.get('type')} | `{fs.get('source')}` |")
    w("")
    if local or shared:
        w("### Introduction")
        w("")
        first = (local or shared)[0]
        jobs, rt, eng = first["numjobs"], first["runtime_s"], first["engine"]
        sizes = ", ".join(dict.fromkeys(r["size"] for r in first["rows"]))
        k = 1
        for r in local:
            w(f"{k}. `fio` (the Debian package, {r.get('fio_version', 'fio')}) on `{r['path']}` (on the `{r['fs'].get('mount')}` disk) — "
              f"{len(r['rows'])} runs of `fio` against one scratch directory: file sizes {sizes}, each read and write; {jobs} parallel jobs, 4 KiB "
              f"blocks, `{eng}`, `O_DIRECT` (bypasses the page cache, so the numbers are the filesystem's, not RAM's), {rt} s of "
              "timed IO each. This is the baseline for the shared tables' `local/shared ×` column.")
            k += 1
        for r in shared:
            w(f"{k}. `fio` on `{r['path']}` — the same runs on the shared filesystem.")
            k += 1
        w("")
        w("Every run deleted its own files (`--unlink=1`) and the scratch directory was removed afterwards. In the tables "
          "latency is the mean per IO in msec, bw is MiB per second, and IOPS (input/output operations per second) is in millions.")
        w("")
    if local:
        w("### Local disk IO benchmark")
        w("")
        _fio_table(w, local[0]["rows"], None)
    for r in shared:
        w(f"### {_shared_heading(r)}")
        w("")
        w("`local/shared ×` divides the local disk table's bandwidth by this table's bandwidth on the same row: how many times "
          "slower this filesystem is; 1 would mean as fast as the local disk.")
        w("")
        _fio_table(w, r["rows"], local[0]["rows"] if local else None)
    left = [r["scratch_left"] for r in st.get("local", []) + st.get("shared", []) if r.get("scratch_left")]
    for s in left:
        gaps["storage"].append(f"fio left scratch behind, moved to {s}; delete it once checked")
    if gaps["storage"]:
        w("### Gaps")
        w("")
        for g in gaps["storage"]:
            w(f"- {g}")
        w("")

    # ---- Findings
    w("## Findings")
    w("")
    for name, items in (("Healthy subsystems", healthy), ("Underperforming subsystems", under), ("Needs operator input", operator)):
        if not items:
            continue
        w(f"### {name}")
        w("")
        if name == "Needs operator input":
            w("These subsystems were measured cleanly but cannot be called healthy or underperforming until the figures they "
              "are supposed to hit arrive.")
            w("")
        for it in items:
            w(f"- {it}")
        w("")
    return "\n".join(L).rstrip() + "\n"


def _slug(h: str) -> str:
    from .report_check import slug  # noqa: PLC0415

    return slug(h)


def _shared_heading(r: dict[str, Any]) -> str:
    t = (r.get("fs") or {}).get("type") or ""
    return f"Shared {t} IO benchmark" if t else "Shared IO benchmark"


def _saturated_mhz(msmf: dict[str, Any] | None) -> str:
    if not msmf:
        return ""
    vals = [c.get("sm_mhz") for c in msmf.get("gpu0_candidates", []) if c.get("sm_mhz") and not c.get("suspect")]
    vals += [g.get("sm_mhz") for g in msmf.get("per_gpu", []) if g.get("sm_mhz")]
    if not vals:
        return ""
    lo, hi = min(vals), max(vals)
    return f"{lo:.0f}" if lo == hi else f"{lo:.0f}–{hi:.0f}"


def _shape(s: list[int]) -> str:
    return "×".join(str(x) for x in s)


def _compute_perf(w, nodes: list[dict[str, Any]], spec: float | None, gname: str) -> None:
    n0 = nodes[0]["compute"]
    mamf, msmf = n0["mamf"], n0.get("msmf")
    ngpu = len(nodes[0]["env"].get("gpus") or [])
    w("### GPU performance benchmarks")
    w("")
    dims = ", ".join(str(d) for d in mamf["dims"])
    w("Compute is measured by timing matrix multiplication. How fast a `matmul` runs depends on its matmul shape (the M×N×K "
      f"dimensions), so the script searches: GPU0 timed {mamf['tried']} matmul shapes, every combination of M, N and K from "
      f"{{{dims}}}, each for at least 10 back-to-back calls and 20 ms. "
      + (f"It then ran {len(msmf['gpu0_candidates'])} candidate shapes (the fastest large ones, plus 8192³ and 16384³) back to back for {msmf['seconds']:.0f} s each "
         "and kept the fastest that held the board within 10% of its power limit"
         + (", while every other GPU of the node ran a continuous matmul; every other GPU then measured that winning shape the same way."
            if msmf.get("siblings_busy") else "; this node's only GPU had no siblings to keep busy during that run.")
         if msmf else ""))
    w("")
    best = mamf["best"]
    spec_txt = f" ({spec:.0f} TFLOPS)" if spec else ""
    w(f"Two numbers vs official BF16 TFLOPS on {gname}{spec_txt}:")
    w("")
    wm = (f", {best['power_w']:.0f} W / {best['sm_mhz']:.0f} MHz" if best.get("power_w") and best.get("sm_mhz") else "")
    w(f"- **MAMF** — highest TFLOPS reached by any matmul shape on GPU0: **{best['tflops']:.0f} TFLOPS** at {_shape(best['shape'])}"
      + wm + (f", {_pct(round(best['tflops']), spec)} of spec" if spec else "")
      + ". A short burst at boost clock with the board under its power limit: a ceiling, not a rate any sustained workload holds.")
    if msmf:
        node_msmf = min(g["tflops"] for n in nodes for g in n["compute"]["msmf"]["per_gpu"])
        win = next(c for c in msmf["gpu0_candidates"] if c["shape"] == msmf["shape"])
        w(f"- **MSMF** — best rate that survives once the shape pins the board at its power limit and the clock settles: "
          f"**{round(node_msmf)} TFLOPS**" + (f" ({_pct(round(node_msmf), spec)} of spec)" if spec else "")
          + f" at {_shape(msmf['shape'])}, {win['power_w']:.0f} W / {win['sm_mhz']:.0f} MHz on GPU0. "
          + ("The node figure is the slowest GPU, since synchronous work runs at its pace. " if ngpu > 1 else
             "This is the node's only GPU, so there is no median or spread. ")
          + "Compare a sustained workload to this number.")
    w("")
    if msmf:
        w("| node | GPU | MSMF (TFLOPS) | MSMF shape | W / MHz |" + (" MSMF % spec |" if spec else ""))
        w("| --- | ---: | ---: | --- | --- |" + (" ---: |" if spec else ""))
        for i, n in enumerate(nodes):
            for g in n["compute"]["msmf"]["per_gpu"]:
                t = round(g["tflops"])
                wm = f"{g['power_w']:.0f} / {g['sm_mhz']:.0f}" if g.get("power_w") and g.get("sm_mhz") else "unread"
                w(f"| `{n['node']}` | {g['gpu']} | {t} | {_shape(n['compute']['msmf']['shape'])} | {wm} |"
                  + (f" {_pct(t, spec)} |" if spec else ""))
        w("")
        allv = [g["tflops"] for n in nodes for g in n["compute"]["msmf"]["per_gpu"]]
        if len(allv) > 1:
            med = statistics.median(allv)
            w(f"Node MSMF (slowest GPU) {round(min(allv))} TFLOPS; median {round(med)} TFLOPS; spread {round(max(allv) - min(allv))} TFLOPS.")
            w("")
        idle = [(n["node"], g["gpu"]) for n in nodes for g in n["compute"]["msmf"]["per_gpu"] if g.get("idle_siblings")]
        for host, g in idle:
            w(f"`{host}`:gpu{g} saw idle siblings during its sustained run, so its MSMF reads high.")
        w("The shape column is the M×N×K that won the sustained regime; W / MHz is the board power and SM clock NVML read while it ran.")
        w("")


def _lemon(w, nodes: list[dict[str, Any]]) -> None:
    lem0 = nodes[0]["compute"]["lemon"]
    slow = [(i, n["node"], g) for i, n in enumerate(nodes) for g in n["compute"].get("lemon", {}).get("slow", [])]
    dead = [(i, n["node"], g) for i, n in enumerate(nodes) for g in n["compute"].get("lemon", {}).get("dead", [])]
    w("### Find underperforming GPUs")
    w("")
    if not slow and not dead:
        w("**TLDR: no under-performing or dead GPUs**")
    else:
        parts = []
        if slow:
            parts.append("under-performing: " + ", ".join(_gpu_label(h, i, g) for i, h, g in slow))
        if dead:
            parts.append("dead: " + ", ".join(_gpu_label(h, i, g) for i, h, g in dead))
        w("**TLDR: " + "; ".join(parts) + "**")
    w("")
    w("An under-performing GPU is slow or throttled; a dead one is the extreme case. This pass runs the same matmul shape "
      f"(M=N=K={lem0['dim']}, bf16, {lem0['iters']} timed calls) on every GPU in turn with its siblings idle, three passes, and "
      "flags a card that lands more than 2% below its node's median in all three passes. It is not MAMF: there is no search "
      "over matmul shapes and no burst/sustained split.")
    w("")
    w(f"This GPU has {lem0['sms']} SMs. At 128×256 output tiles the {lem0['dim']}³ matmul is {lem0['ctas']} CTAs (cooperative "
      f"thread arrays, one CUDA thread block each): {lem0['waves']} full waves and a tail of {lem0['tail']} CTAs, "
      f"{100 * lem0['wave_efficiency']:.1f}% wave efficiency.")
    w("")
    ng = len(lem0["passes"][0])
    w("| node | pass | " + " | ".join(f"gpu{g} (TFLOPS)" for g in range(ng)) + " | min (gpu) | max (TFLOPS) |")
    w("| --- | ---: | " + " | ".join("---:" for _ in range(ng)) + " | --- | ---: |")
    for n in nodes:
        lem = n["compute"].get("lemon") or {}
        for p, row in enumerate(lem.get("passes", []), 1):
            vals = [v for v in row if v is not None]
            cells = [f"{v:.0f}" if v is not None else "failed" for v in row]
            mn = min(vals) if vals else None
            mi = row.index(mn) if vals else None
            w(f"| `{n['node']}` | {p} | " + " | ".join(cells) + f" | {mn:.0f} (gpu{mi}) | {max(vals):.0f} |" if vals else "")
    w("")
    for i, n in enumerate(nodes):
        lem = n["compute"].get("lemon") or {}
        meds = lem.get("medians") or []
        for g in range(ng):
            dips = [p for p, row in enumerate(lem.get("passes", [])) if row[g] is not None and meds[p] and row[g] < 0.98 * meds[p]]
            if dips and g not in lem.get("slow", []):
                nums = " / ".join(f"{row[g]:.0f}" for row in lem["passes"])
                w(f"{_gpu_label(n['node'], i, g)} dipped more than 2% below the node median in {len(dips)} of 3 passes "
                  f"({nums} TFLOPS), which did not repeat in all three, so it is not flagged.")
    w("")


def _ar_table(w, rows: list[dict[str, Any]]) -> None:
    w("| payload | time (µs) | algbw (GB/s) | busbw (GB/s) |")
    w("| ---: | ---: | ---: | ---: |")
    for r in rows:
        w(f"| {gpu_bench.format_iec(r['bytes'])} | {r['time_us']:.1f} | {r['algbw_gbps']:.1f} | {r['busbw_gbps']:.1f} |")
    w("")
    pk = max(rows, key=lambda r: r["busbw_gbps"])
    w(f"Peak busbw {pk['busbw_gbps']:.1f} GB/s at {gpu_bench.format_iec(pk['bytes'])}.")
    w("")


def _fio_table(w, rows: list[dict[str, Any]], local_rows: list[dict[str, Any]] | None) -> None:
    grouped = local_rows is None
    hdr = "| size | rw | latency (msec) | bw (MiBps) | IOPS (M) |"
    al = "| ---: | --- | ---: | ---: | ---: |"
    if local_rows is not None:
        hdr += " local/shared × |"
        al += " ---: |"
    w(hdr)
    w(al)
    lk = {(r["size"], r["rw"]): r for r in (local_rows or [])}
    for r in rows:
        line = f"| {r['size']} | {r['rw']} | {r['latency_msec']:.3f} | {_bw(r['bw_mibps'], grouped)} | {r['iops_m']:.3f} |"
        if local_rows is not None:
            lr = lk.get((r["size"], r["rw"]))
            line += f" {lr['bw_mibps'] / r['bw_mibps']:.1f} |" if lr and r["bw_mibps"] else " |"
        w(line)
    w("")


def _fio_line(rows: list[dict[str, Any]]) -> str:
    by = {(r["size"], r["rw"]): r["bw_mibps"] for r in rows}
    sizes = list(dict.fromkeys(r["size"] for r in rows))
    parts = []
    for s in sizes:
        rd, wr = by.get((s, "read")), by.get((s, "write"))
        parts.append(f"{s} **{rd:_.1f} MiB/s / {wr:_.1f} MiB/s**")
    return "read / write: " + ", ".join(parts)


def _findings(nodes, spec, local, shared, inter) -> tuple[list[str], list[str], list[str]]:
    healthy: list[str] = []
    under: list[str] = []
    operator: list[str] = []
    n0 = nodes[0]
    comp = n0.get("compute", {})
    if comp.get("lemon") or comp.get("msmf"):
        bad = []
        for i, n in enumerate(nodes):
            lem = n["compute"].get("lemon") or {}
            for g in lem.get("slow", []):
                nums = " / ".join(f"{row[g]:.0f}" for row in lem["passes"])
                pct = " / ".join(f"{100 * (1 - row[g] / m):.1f}%" for row, m in zip(lem["passes"], lem["medians"]))
                bad.append(f"{_gpu_label(n['node'], i, g)} — lemon GEMM {nums} TFLOPS in three passes, {pct} below the node median")
            for g in lem.get("dead", []):
                bad.append(f"{_gpu_label(n['node'], i, g)} — dead: the lemon GEMM failed ({lem['errors'].get(str(g), 'no result')})")
        under += bad
        if not bad:
            parts = []
            if comp.get("mamf") and spec:
                b = comp["mamf"]["best"]
                parts.append(f"MAMF {b['tflops']:.0f} TFLOPS ({_pct(round(b['tflops']), spec)} of the official {spec:.0f} TFLOPS)")
            if comp.get("msmf"):
                t = min(g["tflops"] for n in nodes for g in n["compute"]["msmf"]["per_gpu"])
                parts.append(f"MSMF {round(t)} TFLOPS" + (f" ({_pct(round(t), spec)})" if spec else ""))
            if comp.get("lemon"):
                ps = [v for n in nodes for row in n["compute"]["lemon"]["passes"] for v in row if v is not None]
                parts.append(f"lemon GEMM {min(ps):.0f}–{max(ps):.0f} TFLOPS on every GPU in three passes with no GPU more than 2% "
                             "below its node median in all three")
            healthy.append("GPUs: " + "; ".join(parts) + ".")
    intra = (n0.get("network") or {}).get("intra") or {}
    if intra.get("rows"):
        pk = max(intra["rows"], key=lambda r: r["busbw_gbps"])
        operator.append(f"intra-node fabric: peak busbw {pk['busbw_gbps']:.1f} GB/s at {gpu_bench.format_iec(pk['bytes'])} over "
                        f"{intra['ranks']} ranks; obtain the link's advertised unidirectional GB/s to judge it.")
    if inter:
        pk = max(inter["rows"], key=lambda r: r["busbw_gbps"])
        operator.append(f"inter-node fabric: peak busbw {pk['busbw_gbps']:.1f} GB/s at {gpu_bench.format_iec(pk['bytes'])} over "
                        f"{inter['ranks']} ranks (a mixed NVLink + NIC figure, not a NIC rate).")
    for r in local:
        fs = r["fs"]
        operator.append(
            f"local disk (`{fs.get('mount')}`, {_size(fs.get('size_bytes', 0))}, {fs.get('type')} on `{fs.get('source')}`): "
            f"{_fio_line(r['rows'])}. The provisioned figures of this disk are unknown, so there is no target to compare against; "
            "obtain the expected MiB/s or IOPS at each measured file size, read and write, from one client with "
            f"{r['numjobs']} jobs, 4 KiB blocks and `O_DIRECT`.")
    for r in shared:
        fs = r["fs"]
        operator.append(
            f"shared network FS `{fs.get('mount')}` ({_size(fs.get('size_bytes', 0))}, {fs.get('type')}): {_fio_line(r['rows'])}. "
            "Its provisioned throughput is unknown, so there is no target to compare against: filesystem software publishes no "
            "performance figures, because throughput is a property of the deployment (storage targets, their devices, the network, "
            "the stripe count). Obtain the service tier purchased for this mount and its default stripe layout, as expected MiB/s "
            f"or IOPS per measured file size, read and write, per client with {r['numjobs']} jobs, 4 KiB blocks and `O_DIRECT`.")
    return healthy, under, operator


def busbw_plot(rows: list[dict[str, Any]], path: str | Path, title: str) -> Path:
    """busbw (GB/s) against payload, log-x, saved as PNG at ``path`` (matplotlib, Agg)."""
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot([r["bytes"] for r in rows], [r["busbw_gbps"] for r in rows], marker="o")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("payload (bytes)")
    ax.set_ylabel("busbw (GB/s)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(p, dpi=100)
    plt.close(fig)
    return p


def write_report(nodes: list[dict[str, Any]], reports_dir: str | Path, *, date: str, access: str,
                 inter: dict[str, Any] | None = None, extra_gaps: list[str] | None = None,
                 nccl_env_source: str = "the environment the benchmarks ran in", name: str | None = None,
                 save_raw: bool = True) -> tuple[Path, list[Violation]]:
    """Write ``<reports_dir>/<name or eval-<gpu>-<date>>.md`` and (``save_raw``) the results JSON
    and plots into ``<reports_dir>/raw-<date>/``; run the checker on the written text.
    Returns (report path, violations)."""
    rd = Path(reports_dir)
    raw = f"raw-{date}"
    (rd / raw).mkdir(parents=True, exist_ok=True)
    if save_raw:
        for n in nodes:
            (rd / raw / f"eval-{n['node']}.json").write_text(json.dumps(n, indent=1, default=str) + "\n")
        if inter:
            (rd / raw / "allreduce-inter.json").write_text(json.dumps(inter, indent=1) + "\n")
    intra = (nodes[0].get("network") or {}).get("intra") or {}
    if intra.get("rows"):
        busbw_plot(intra["rows"], rd / raw / "busbw-intra.png", f"intra-node all-reduce, {intra['ranks']} ranks")
    if inter and inter.get("rows"):
        busbw_plot(inter["rows"], rd / raw / "busbw-inter.png", f"inter-node all-reduce, {inter['ranks']} ranks")
    text = build_report(nodes, raw_dir=raw, access=access, inter=inter, extra_gaps=extra_gaps, nccl_env_source=nccl_env_source)
    gpus = nodes[0]["env"].get("gpus") or []
    gtag = (gpus[0]["name"].split()[-1].lower() if gpus else "cpu")
    path = rd / (name or f"eval-{gtag}-{date}.md")
    path.write_text(text)
    return path, check_report(text)


def load_results(paths: list[str | Path]) -> list[dict[str, Any]]:
    """Read eval-result JSON files (``gpu_bench.py eval --json``). Raises InputError when one is
    missing, not JSON, or not an eval result."""
    out = []
    for p in paths:
        p = Path(p)
        if not p.is_file():
            raise InputError(f"no eval result at {p}")
        try:
            d = json.loads(p.read_text())
        except ValueError as e:
            raise InputError(f"{p}: not JSON ({e})") from e
        if d.get("kind") != "eval":
            raise InputError(f"{p}: not a gpu_bench eval result (kind={d.get('kind')!r})")
        out.append(d)
    return out
