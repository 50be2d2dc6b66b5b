#!/usr/bin/env python3
"""GPU, host and storage measurements for ``ai4s-graph probe`` and ``ai4s-graph eval-cluster``.

SELF-CONTAINED on purpose: standard library + torch + (optional) ``pynvml`` from
``nvidia-ml-py`` (or ``amdsmi`` on AMD). GPU nodes often carry only a torch install, so this file
must run there as a plain script::

    NCCL_NVLS_ENABLE=0 python3 gpu_bench.py probe --json $OUT/probe.json
    NCCL_NVLS_ENABLE=0 python3 gpu_bench.py eval  --json $OUT/eval.json --local-dir /tmp --fio .fio/fio

and must not import pydantic, typer or anything of ai4s_graph. ``ai4s_graph.tools.cluster.node_probe`` and
``ai4s_graph.tools.cluster.evalcluster`` import the functions below in-process where torch exists.

What is measured, and where each method comes from (seed 003, "evaluate-cluster" runbook):

- kernel launch latency: back-to-back empty kernels (``torch.cuda._sleep(0)``), µs per launch
  (seed 000 lesson 18 saw 3.5-3.8 µs per HIP launch on every GPU of every node);
- device-to-device copy: ``dst.copy_(src)`` of 1 GiB, GB/s counting bytes read plus written;
- MAMF / MSMF: a short matmul shape search (M x N x K, bf16) with board power and SM clock read
  through NVML while each shape runs; MSMF shapes must hold the board near its power limit, and on
  a node with several GPUs the sustainable run happens while every other GPU runs a continuous
  matmul (seed 003, "GPU performance benchmarks");
- lemon GEMM: fixed 16384^3 bf16 matmul on every GPU, siblings idle, three passes (seed 003);
- all-reduce: NCCL (RCCL on ROCm) over payload sizes, algbw = bytes / time, busbw = algbw x
  2(n-1)/n (the ring formula of nccl-tests' PERFORMANCE.md);
- collective sweep (``gpu_collectives.py``): all-reduce, all-gather and reduce-scatter by message
  size, busbw factors 2(n-1)/n, (n-1)/n, (n-1)/n (nccl-tests), once over NVLink/PCIe peer-to-peer
  and once with ``NCCL_P2P_DISABLE=1`` (host shared memory) for contrast;
- storage: Debian's ``fio`` (16 jobs, 4 KiB blocks, libaio, O_DIRECT, --unlink=1) over file sizes
  16 KiB / 1 MiB / 1 GiB, read and write (seed 003, "Storage").
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any


if __package__:
    from .gpu_common import (SCHEMA, LEMON_DIM, LEMON_TILE, SLOW_GPU_FRACTION, MSMF_POWER_FRACTION,  # noqa: F401
                             FIO_SIZES, now_utc, parse_iec, format_iec, _run, torch_or_none, gpu_count,
                             Telemetry, Sampler)
    from .gpu_collectives import (default_payloads, allreduce_single_node, allreduce_distributed,  # noqa: F401
                                  collective_sweep, COLLECTIVES)
    from .gpu_matmul import mamf_search, msmf, lemon, judge_lemon, sm_coverage, sustained_matmul  # noqa: F401
    from .gpu_storage import find_fio, fio_scan, fs_info  # noqa: F401
else:  # a plain script on a GPU node: the sibling files
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from gpu_common import (SCHEMA, LEMON_DIM, LEMON_TILE, SLOW_GPU_FRACTION, MSMF_POWER_FRACTION,  # type: ignore  # noqa: E402,F401
                            FIO_SIZES, now_utc, parse_iec, format_iec, _run, torch_or_none, gpu_count,
                            Telemetry, Sampler)
    from gpu_collectives import (default_payloads, allreduce_single_node, allreduce_distributed,  # type: ignore  # noqa: E402,F401
                                 collective_sweep, COLLECTIVES)
    from gpu_matmul import mamf_search, msmf, lemon, judge_lemon, sm_coverage, sustained_matmul  # type: ignore  # noqa: E402,F401
    from gpu_storage import find_fio, fio_scan, fs_info  # type: ignore  # noqa: E402,F401

# ----------------------------------------------------------------------------------------------
# probe: launch latency, device-to-device copy
# ----------------------------------------------------------------------------------------------


def launch_latency_us(device: int, launches: int = 2000, reps: int = 5) -> float:
    """Mean wall time per empty-kernel launch on GPU ``device``, in µs (median of ``reps`` runs
    of ``launches`` back-to-back ``torch.cuda._sleep(0)`` kernels, synchronised once per run).

    Healthy reference: 3.5-3.8 µs per launch on every GPU of every node (seed 000 lesson 18, HIP)."""
    import torch  # noqa: PLC0415

    with torch.cuda.device(device):
        for _ in range(200):
            torch.cuda._sleep(0)
        torch.cuda.synchronize()
        vals = []
        for _ in range(reps):
            t0 = time.perf_counter()
            for _ in range(launches):
                torch.cuda._sleep(0)
            torch.cuda.synchronize()
            vals.append((time.perf_counter() - t0) / launches * 1e6)
    return round(statistics.median(vals), 3)


def d2d_copy_gbs(device: int, nbytes: int = 1 << 30, iters: int = 20) -> float:
    """Device-to-device copy bandwidth of GPU ``device`` in GB/s (10^9 bytes/s), counting bytes
    read plus bytes written (2 x ``nbytes`` per copy), best of three timed runs of ``iters``
    copies (CUDA events)."""
    import torch  # noqa: PLC0415

    with torch.cuda.device(device):
        src = torch.empty(nbytes, dtype=torch.uint8, device="cuda").fill_(1)
        dst = torch.empty_like(src)
        for _ in range(3):
            dst.copy_(src)
        best = 0.0
        for _ in range(3):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(iters):
                dst.copy_(src)
            b.record()
            b.synchronize()
            s = a.elapsed_time(b) / 1000.0
            best = max(best, 2 * nbytes * iters / s / 1e9)
        del src, dst
        torch.cuda.empty_cache()
    return round(best, 1)


# ----------------------------------------------------------------------------------------------
# environment dump
# ----------------------------------------------------------------------------------------------


def _os_pretty() -> str:
    with contextlib.suppress(OSError):
        for line in open("/etc/os-release"):
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip().strip('"')
    return platform.platform()


def _numa_nodes() -> int:
    with contextlib.suppress(OSError):
        return len([d for d in os.listdir("/sys/devices/system/node") if d.startswith("node") and d[4:].isdigit()])
    return 1


def env_dump(paths: list[str] | None = None) -> dict[str, Any]:
    """Seed 003 "Environment dump": date, host, kernel, CPUs/NUMA, RAM, OS, Python, torch/CUDA/
    NCCL versions, per-GPU static facts (NVML), topology, fabric inventory, filesystems, NCCL env,
    compute apps. Everything is a reading; nothing is assumed."""
    torch = torch_or_none()
    env: dict[str, Any] = {
        "datetime_utc": now_utc(), "hostname": socket.gethostname().split(".")[0], "uname": " ".join(platform.uname()),
        "kernel": platform.release(), "nproc": os.cpu_count(), "numa_nodes": _numa_nodes(), "os": _os_pretty(),
        "python": platform.python_version(),
        "nccl_env": {k: v for k, v in sorted(os.environ.items()) if k.startswith(("NCCL_", "FI_", "AWS_OFI", "TORCH_SYMM", "NVSHMEM_"))},
    }
    with contextlib.suppress(OSError):
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal:"):
                env["mem_total_bytes"] = int(line.split()[1]) * 1024
    with contextlib.suppress(OSError):
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                env["cpu_model"] = line.split(":", 1)[1].strip()
                break
    if torch is not None:
        env["torch"] = torch.__version__
        env["cuda"] = torch.version.cuda
        env["hip"] = getattr(torch.version, "hip", None)
        with contextlib.suppress(Exception):
            v = torch.cuda.nccl.version()
            env["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
        gpus = []
        if torch.cuda.is_available():
            tel = Telemetry()
            env["telemetry"] = tel.kind or f"unavailable ({tel.reason.strip('; ')})"
            for i in range(torch.cuda.device_count()):
                p = torch.cuda.get_device_properties(i)
                g = {"index": i, "name": p.name, "sm_count": p.multi_processor_count,
                     "memory_total_bytes": int(p.total_memory), "capability": f"{p.major}.{p.minor}"}
                if tel.available:
                    g.update({k: v for k, v in tel.static(i).items() if k not in ("name",)})
                gpus.append(g)
        env["gpus"] = gpus
    rc, out = _run(["nvidia-smi", "--query-gpu=index,name,uuid,driver_version,memory.total,power.limit,power.max_limit,"
                    "clocks.max.sm,clocks.sm,power.draw,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.max",
                    "--format=csv"])
    env["nvidia_smi_query"] = out if rc == 0 else ""
    rc, out = _run(["nvidia-smi", "topo", "-m"])
    env["topo"] = out if rc == 0 else ""
    rc, out = _run(["nvidia-smi", "--query-compute-apps=pid,used_memory,process_name", "--format=csv"])
    env["compute_apps"] = out if rc == 0 else ""
    ib = "/sys/class/infiniband"
    nics = []
    if os.path.isdir(ib):
        for d in sorted(os.listdir(ib)):
            rate = ""
            with contextlib.suppress(OSError):
                rate = open(os.path.join(ib, d, "ports", "1", "rate")).read().strip()
            nics.append({"name": d, "rate": rate})
    env["ib_devices"] = nics
    rc, out = _run(["rdma", "link"])
    env["rdma_link"] = out if rc == 0 else ""
    fss = []
    for p in ["/"] + list(paths or []):
        if os.path.exists(p):
            fss.append({"path": p, **fs_info(p)})
    env["filesystems"] = fss
    return env


# ----------------------------------------------------------------------------------------------
# top level
# ----------------------------------------------------------------------------------------------


def dcgm_diag(level: int = 2, timeout_s: float = 1200) -> dict[str, Any]:
    """``dcgmi diag -r <level>`` (seed 003 "Hardware health": level 2 checks GPU memory, memory
    bandwidth and PCIe/NVLink, about 10 minutes on 8 GPUs). ``{"ran": False, "reason"}`` when
    dcgmi is not installed; else ``{"ran": True, "rc", "failed": [lines with Fail], "output"}``."""
    if not shutil.which("dcgmi"):
        return {"ran": False, "reason": "dcgmi is not installed on this node"}
    if shutil.which("nv-hostengine"):
        _run(["nv-hostengine"], timeout=30)
    rc, out = _run(["dcgmi", "diag", "-r", str(level)], timeout=timeout_s)
    failed = [ln.strip() for ln in out.splitlines() if "fail" in ln.lower()]
    return {"ran": rc == 0 or bool(failed), "rc": rc, "level": level, "failed": failed, "output": out[-20000:],
            **({} if rc == 0 or failed else {"reason": f"dcgmi diag exited {rc}: {out.splitlines()[-1] if out else ''}"})}


def probe_gpus(allreduce: bool = True, ar_max_bytes: int = 256 << 20) -> dict[str, Any]:
    """GPU parts of the node probe: launch latency and D2D copy per GPU, and the single-node
    all-reduce. ``{"skipped": reason}`` when no GPU is visible."""
    n, why = gpu_count()
    if n == 0:
        return {"skipped": why}
    out: dict[str, Any] = {"gpus": []}
    for i in range(n):
        g: dict[str, Any] = {"index": i}
        try:
            import torch  # noqa: PLC0415

            g["name"] = torch.cuda.get_device_name(i)  # the datasheet floor of the copy check needs the family
        except Exception:  # noqa: BLE001
            pass
        try:
            g["launch_us"] = launch_latency_us(i)
        except Exception as e:  # noqa: BLE001
            g["launch_error"] = f"{type(e).__name__}: {e}"
        try:
            g["d2d_gbps"] = d2d_copy_gbs(i)
        except Exception as e:  # noqa: BLE001
            g["d2d_error"] = f"{type(e).__name__}: {e}"
        out["gpus"].append(g)
    if allreduce:
        out["allreduce"] = allreduce_single_node(n, default_payloads(ar_max_bytes))
    return out


def collectives_contrast(ngpus: int, max_bytes: int, iters: int = 20, device: str = "cuda") -> dict[str, Any]:
    """The collective sweep (:func:`collective_sweep`: all-reduce, all-gather, reduce-scatter by
    message size) twice: ``"p2p"`` with NCCL's default transports (NVLink / PCIe peer-to-peer)
    and ``"p2p_disabled"`` with ``NCCL_P2P_DISABLE=1`` (through host shared memory), for contrast."""
    pays = default_payloads(max_bytes)
    return {"p2p": collective_sweep(ngpus, pays, iters=iters, device=device),
            "p2p_disabled": collective_sweep(ngpus, pays, iters=iters, env={"NCCL_P2P_DISABLE": "1"}, device=device)}


def run_eval(args: argparse.Namespace) -> dict[str, Any]:
    """Every eval phase on this node; each phase's failure is recorded, never fatal."""
    t0 = time.time()
    shared = [p for p in (args.shared_dir or []) if p]
    res: dict[str, Any] = {"schema": SCHEMA, "kind": "eval", "started_utc": now_utc(), "gaps": [],
                           "env": env_dump([args.local_dir] + shared)}
    res["node"] = res["env"]["hostname"]
    n, why = gpu_count()
    tel = Telemetry() if n else None
    comp: dict[str, Any] = {}
    if n == 0:
        res["gaps"].append(f"compute: {why}")
    else:
        if tel is not None and not tel.available:
            res["gaps"].append(f"compute: no power/clock telemetry ({tel.reason.strip('; ')})")
        try:
            comp["probe"] = probe_gpus(allreduce=False)
        except Exception as e:  # noqa: BLE001
            res["gaps"].append(f"compute: launch/copy probe failed: {type(e).__name__}: {e}")
        try:
            dims = [int(x) for x in args.mamf_dims.split(",")]
            comp["mamf"] = mamf_search(0, dims, tel, iters=args.mamf_iters, budget_s=args.mamf_budget)
            big = [r["shape"] for r in comp["mamf"]["all"] if min(r["shape"]) >= args.msmf_min_dim]
            extra = [[d, d, d] for d in (8192, 16384)]
            cands = []
            for s in big[: args.msmf_candidates] + extra:
                if s not in cands:
                    cands.append(s)
            comp["msmf"] = msmf(n, cands[: args.msmf_candidates + 1], tel, args.msmf_seconds)
        except Exception as e:  # noqa: BLE001
            res["gaps"].append(f"compute: MAMF/MSMF failed: {type(e).__name__}: {e}")
        try:
            comp["lemon"] = lemon(n, passes=3)
        except Exception as e:  # noqa: BLE001
            res["gaps"].append(f"compute: lemon GEMM failed: {type(e).__name__}: {e}")
        comp["dcgm"] = dcgm_diag(args.dcgm_level) if args.dcgm_level else {"ran": False, "reason": "not requested (--dcgm-level 0)"}
    res["compute"] = comp
    net: dict[str, Any] = {}
    if n:
        net["intra"] = allreduce_single_node(n, default_payloads(parse_iec(args.ar_max)))
        if "error" in net["intra"]:
            res["gaps"].append(f"network: intra-node all-reduce failed: {net['intra']['error']}")
        if args.collectives and n >= 2:
            net["collectives"] = collectives_contrast(n, parse_iec(args.coll_max), iters=args.coll_iters)
            for label, r in net["collectives"].items():
                if "error" in r:
                    res["gaps"].append(f"network: collective sweep ({label}) failed: {r['error']}")
    res["network"] = net
    st: dict[str, Any] = {}
    sizes = [s.strip() for s in args.fio_sizes.split(",")]
    for label, path in [("local", args.local_dir)] + [("shared", p) for p in shared]:
        r = fio_scan(path, sizes, runtime_s=args.fio_runtime, numjobs=args.fio_jobs, fio=args.fio)
        st.setdefault(label, []).append(r)
        if r.get("error"):
            res["gaps"].append(f"storage: fio on {path}: {r['error']}")
    res["storage"] = st
    res["elapsed_s"] = round(time.time() - t0, 1)
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("probe", help="GPU parts of the node health probe")
    p.add_argument("--json", default="-")
    p.add_argument("--no-allreduce", action="store_true")
    e = sub.add_parser("eval", help="every eval-cluster measurement on this node")
    e.add_argument("--json", default="-")
    e.add_argument("--local-dir", default="/tmp")
    e.add_argument("--shared-dir", action="append", default=[])
    e.add_argument("--fio", default=None)
    e.add_argument("--fio-sizes", default=",".join(FIO_SIZES))
    e.add_argument("--fio-runtime", type=int, default=180)
    e.add_argument("--fio-jobs", type=int, default=16)
    e.add_argument("--mamf-dims", default="2048,4096,6144,8192,10240,12288,14336,16384")
    e.add_argument("--mamf-iters", type=int, default=10)
    e.add_argument("--mamf-budget", type=float, default=120.0)
    e.add_argument("--msmf-candidates", type=int, default=3)
    e.add_argument("--msmf-min-dim", type=int, default=8192)
    e.add_argument("--msmf-seconds", type=float, default=10.0)
    e.add_argument("--ar-max", default="4GiB")
    e.add_argument("--dcgm-level", type=int, default=2, help="dcgmi diag level; 0 skips it")
    e.add_argument("--collectives", action=argparse.BooleanOptionalAction, default=True,
                   help="all-reduce/all-gather/reduce-scatter sweep, with and without NCCL_P2P_DISABLE=1")
    e.add_argument("--coll-max", default="1GiB")
    e.add_argument("--coll-iters", type=int, default=20)
    c = sub.add_parser("collectives", help="collective busbw sweep on this node's GPUs (P2P and P2P disabled)")
    c.add_argument("--json", default="-")
    c.add_argument("--coll-max", default="1GiB")
    c.add_argument("--coll-iters", type=int, default=20)
    c.add_argument("--cpu-ranks", type=int, default=0, help="rehearse on the CPU with this many gloo ranks")
    d = sub.add_parser("allreduce", help="multi-node all-reduce rank (under srun/torchrun)")
    d.add_argument("--json", default="-")
    d.add_argument("--ar-max", default="4GiB")
    f = sub.add_parser("fio", help="fio scan of one directory")
    f.add_argument("path")
    f.add_argument("--json", default="-")
    f.add_argument("--fio", default=None)
    f.add_argument("--sizes", default=",".join(FIO_SIZES))
    f.add_argument("--runtime", type=int, default=180)
    f.add_argument("--jobs", type=int, default=16)
    a = ap.parse_args(argv)
    if a.cmd == "probe":
        res = {"schema": SCHEMA, "kind": "probe", "node": socket.gethostname().split(".")[0],
               "started_utc": now_utc(), **probe_gpus(allreduce=not a.no_allreduce)}
    elif a.cmd == "eval":
        res = run_eval(a)
    elif a.cmd == "collectives":
        n = a.cpu_ranks or gpu_count()[0]
        res = {"schema": SCHEMA, "kind": "collectives", "node": socket.gethostname().split(".")[0],
               "started_utc": now_utc(),
               **collectives_contrast(n, parse_iec(a.coll_max), a.coll_iters, "cpu" if a.cpu_ranks else "cuda")}
    elif a.cmd == "allreduce":
        res = allreduce_distributed(default_payloads(parse_iec(a.ar_max)))
        if "rows" not in res:
            return 0
    else:
        res = fio_scan(a.path, a.sizes.split(","), runtime_s=a.runtime, numjobs=a.jobs, fio=a.fio)
    text = json.dumps(res, indent=1, default=str)
    if a.json == "-":
        print(text)
    else:
        os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
        with open(a.json, "w") as fh:
            fh.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

