"""What a job's communication is compared with (issue 30): the bus bandwidth the cluster measured
(``ai4s-graph eval-cluster``'s raw JSON, :mod:`ai4s_graph.tools.cluster.gpu_collectives`) and the
communication-library variables the job set (its manifest's ``env``, its job script). Figures only:
which variable is set and what it restricts, the measured bandwidth at a message size; never a
verdict.

**Baseline.** ``network.collectives.<variant>.rows`` (``{op, bytes, busbw_gbps, correct}`` per
all_reduce / all_gather / reduce_scatter and size; variant ``p2p`` is the fabric as configured,
``p2p_disabled`` the same sweep with ``NCCL_P2P_DISABLE=1``), else the all-reduce rows of
``network.inter`` / ``network.intra`` (inter-node first: the fabric a multi-node job crosses). Sizes
follow nccl-tests (``doc/PERFORMANCE.md``): the all-gather's output, the input otherwise, as the
trace's message sizes do. Between two measured sizes the busbw is interpolated linearly in
log2(size) (the sweep measures every 8x: busbw rises smoothly with size towards the link's peak);
outside the measured range it is the nearest end's, marked extrapolated.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Mapping

from ...state.comm import EnvVar
from ..errors import InputError
from ..jsonguard import load_file
from .collective_types import collective_type

Sweep = dict[str, list[tuple[float, float]]]
"""collective type -> [(message bytes, busbw GB/s)], sorted by size."""

#: Variables that change how collectives run, with what they restrict: NCCL User Guide,
#: "Environment Variables" (docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html; RCCL reads
#: the same names: rocm.docs.amd.com RCCL "Environment variables"); PyTorch ProcessGroupNCCL's
#: ``TORCH_NCCL_*`` (torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp); CUDA C++ Programming Guide,
#: "CUDA Environment Variables".
RESTRICTS: dict[str, str] = {
    "NCCL_P2P_DISABLE": "disables the peer-to-peer transport (direct GPU access over NVLink or PCI): GPUs of a node "
                        "then communicate through host shared memory or the network",
    "NCCL_P2P_LEVEL": "the largest GPU distance at which the peer-to-peer transport is used (LOC: never)",
    "NCCL_P2P_DIRECT_DISABLE": "disables direct peer access between GPUs of one process",
    "NCCL_SHM_DISABLE": "disables the shared-memory transport (the network is used between CPU sockets)",
    "NCCL_IB_DISABLE": "disables the InfiniBand/RoCE transport: IP sockets instead",
    "NCCL_NET": "forces the network transport (IB, Socket or a plugin's)",
    "NCCL_SOCKET_IFNAME": "the IP interfaces used for sockets and bootstrap",
    "NCCL_IB_HCA": "the InfiniBand/RoCE adapters used",
    "NCCL_NET_GDR_LEVEL": "the largest GPU-NIC distance at which GPUDirect RDMA is used",
    "NCCL_NET_GDR_READ": "GPUDirect RDMA for sends (reads from GPU memory)",
    "NCCL_CROSS_NIC": "whether rings/trees may use different NICs on different nodes",
    "NCCL_ALGO": "restricts the algorithms NCCL may choose (Ring, Tree, CollNet, NVLS, PAT)",
    "NCCL_PROTO": "restricts the protocols NCCL may choose (LL, LL128, Simple)",
    "NCCL_MIN_NCHANNELS": "the fewest channels (parallel rings/trees, one CUDA block each) NCCL uses",
    "NCCL_MAX_NCHANNELS": "the most channels NCCL uses",
    "NCCL_NTHREADS": "CUDA threads per NCCL block",
    "NCCL_BUFFSIZE": "the buffer size between pairs of ranks",
    "NCCL_NVLS_ENABLE": "NVLink SHARP (NVSwitch multicast) on or off",
    "NCCL_COLLNET_ENABLE": "in-network reductions (CollNet/SHARP) on or off",
    "NCCL_LAUNCH_MODE": "how kernels of several GPUs in one process are launched (PARALLEL, GROUP)",
    "NCCL_DEBUG": "logging only",
    "TORCH_NCCL_HIGH_PRIORITY": "PyTorch creates its NCCL streams with high priority",
    "TORCH_NCCL_BLOCKING_WAIT": "PyTorch's wait() on a collective blocks the host until it completes",
    "TORCH_NCCL_AVOID_RECORD_STREAMS": "PyTorch frees collective tensors by stream sync instead of recordStream",
    "CUDA_DEVICE_MAX_CONNECTIONS": "hardware work queues from the host to the device; 1 serialises the streams' "
                                   "kernels in issue order, so a collective and computation cannot overlap out of it",
}
#: Prefixes of the variables kept from a manifest or job script (the communication stack's).
PREFIXES = ("NCCL_", "RCCL_", "TORCH_NCCL_", "TORCH_DISTRIBUTED_", "NVSHMEM_", "TORCH_SYMM_MEM_", "FI_", "UCX_",
            "CUDA_DEVICE_MAX_CONNECTIONS")
_ASSIGN_RE = re.compile(r"(?:^|[\s;&|(])(?:export\s+)?([A-Z][A-Z0-9_]*)=('[^']*'|\"[^\"]*\"|[^\s;&|)]*)")
_VARIANT = {"p2p": "default"}


def _rows_to_sweep(rows: list) -> Sweep:
    out: Sweep = {}
    for r in rows or []:
        if not isinstance(r, dict) or not r.get("correct", True):
            continue
        b, bw = r.get("bytes"), r.get("busbw_gbps")
        if not isinstance(b, (int, float)) or not isinstance(bw, (int, float)) or b <= 0 or bw <= 0:
            continue
        t = collective_type(str(r.get("op") or "all_reduce"), "")
        out.setdefault(t, []).append((float(b), float(bw)))
    return {k: sorted(v) for k, v in out.items()}


def load_collective_baseline(path: str | Path) -> tuple[dict[str, Sweep], str]:
    """``({variant: Sweep}, source)`` from an eval-cluster raw JSON (module docstring): variant
    ``default`` (the fabric as configured) and, when measured, ``p2p_disabled``.

    Raises InputError when the file cannot be read, is not JSON, or holds no busbw measurement."""
    p = Path(path)
    try:
        d = load_file(p)  # size, depth and string bounds first (tools/jsonguard.py)
    except InputError as e:
        raise InputError(f"baseline {e}") from None
    net = d.get("network") if isinstance(d, dict) else None
    net = net if isinstance(net, dict) else {}
    out: dict[str, Sweep] = {}
    coll = net.get("collectives") if isinstance(net.get("collectives"), dict) else {}
    for variant, part in coll.items():
        if isinstance(part, dict):
            sw = _rows_to_sweep(part.get("rows"))
            if sw:
                out[_VARIANT.get(variant, variant)] = sw
    src = f"{p.name} (network.collectives: {', '.join(sorted(out))})" if out else ""
    if "default" not in out:
        for part in ("inter", "intra"):
            rows = (net.get(part) or {}).get("rows") if isinstance(net.get(part), dict) else None
            sw = _rows_to_sweep([dict(r, op="all_reduce") for r in rows or [] if isinstance(r, dict)])
            if sw:
                out["default"] = sw
                src = f"{p.name} (network.{part}: all-reduce)" + (f"; {src}" if src else "")
                break
    if not out:
        raise InputError(f"baseline {p}: no collective busbw measurement in it (network.collectives or network.intra/inter)")
    return out, src


def baseline_at(rows: list[tuple[float, float]], nbytes: float) -> tuple[float, list[float], bool]:
    """``(busbw GB/s, [measured sizes used], extrapolated)`` at ``nbytes`` (module docstring). Raises
    ValueError on empty ``rows``."""
    if not rows:
        raise ValueError("no baseline rows")
    if nbytes <= rows[0][0]:
        return rows[0][1], [rows[0][0]], nbytes < rows[0][0]
    if nbytes >= rows[-1][0]:
        return rows[-1][1], [rows[-1][0]], nbytes > rows[-1][0]
    for (b0, w0), (b1, w1) in zip(rows, rows[1:]):
        if b0 <= nbytes <= b1:
            if b1 == b0:
                return w0, [b0], False
            f = (math.log2(nbytes) - math.log2(b0)) / (math.log2(b1) - math.log2(b0))
            return w0 + f * (w1 - w0), [b0, b1], False
    return rows[-1][1], [rows[-1][0]], True  # not reached: rows are sorted


def env_from_script(text: str) -> dict[str, str]:
    """Communication-stack variables (:data:`PREFIXES`) a job script or command line assigns:
    ``export NAME=value``, ``NAME=value`` on its own or before a command (quotes removed; the last
    assignment wins)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        s = line.strip()
        if s.startswith("#"):
            continue
        for m in _ASSIGN_RE.finditer(s):
            name, val = m.group(1), m.group(2)
            if name.startswith(PREFIXES):
                out[name] = val[1:-1] if len(val) >= 2 and val[0] == val[-1] and val[0] in "'\"" else val
    return out


def comm_environment(sources: list[tuple[str, Mapping[str, object]]]) -> list[EnvVar]:
    """The communication-stack variables set, from ``[(source name, {name: value})]`` in increasing
    precedence (a later source's value wins and names its source), sorted by name; values as text."""
    got: dict[str, EnvVar] = {}
    for src, env in sources:
        for k, v in (env or {}).items():
            if isinstance(k, str) and k.startswith(PREFIXES):
                got[k] = EnvVar(name=k, value=str(v), source=src, restricts=RESTRICTS.get(k, ""))
    return [got[k] for k in sorted(got)]


def env_from_run(run_dir: str | Path) -> list[EnvVar]:
    """The communication-stack variables of a perf-run directory: its job script
    (``manifest.json`` ``artifacts.job_script``, else ``*.sbatch`` beside it) and command (``cmd.txt``),
    then the manifest's ``env`` (the environment the workload saw: it wins). Missing files are
    skipped; raises InputError when ``manifest.json`` exists but is not a JSON object."""
    d = Path(run_dir)
    man: dict = {}
    mp = d / "manifest.json"
    if mp.is_file():
        man = load_file(mp)  # size, depth and string bounds first; InputError when not JSON
        if not isinstance(man, dict):
            raise InputError(f"{mp}: expected a JSON object")
    sources: list[tuple[str, Mapping[str, object]]] = []
    arts = man.get("artifacts") if isinstance(man.get("artifacts"), dict) else {}
    scripts = [d / arts["job_script"]] if isinstance(arts.get("job_script"), str) else sorted(d.glob("*.sbatch"))
    for f in scripts + [d / "cmd.txt"]:
        if f.is_file():
            sources.append(("job script" if f.name != "cmd.txt" else "command", env_from_script(f.read_text(errors="replace"))))
    if isinstance(man.get("env"), dict):
        sources.append(("manifest", man["env"]))
    return comm_environment(sources)
