"""The verifiers' single-node probe: ``srun -N1 -w <one of the job's nodes> --time=00:05:00`` running
one named check, so a verifier can measure the node directly instead of re-reading the job's files.

Seed 000 ("verifiers may use at most one 1-node ``srun -N1 --time=00:05:00`` interactive probe
(partition/account from .cluster-config.yaml)"); the command itself is built by
:func:`ai4s_graph.tools.slurm.client.srun_probe`. Named checks (:data:`CHECKS`), each a short
self-contained Python script run with the cluster's ``python`` on the node:

- ``matmul``: a short GEMM. On a GPU (torch with CUDA/ROCm): bf16 4096x4096x4096, 3 warm-up + 10
  timed iterations, TFLOP/s = 2·n³·iters / s / 1e12. Without a GPU (the CPU-only local cluster):
  numpy float32 1024³, 2 + 5 iterations, reported in TFLOP/s as well.
- ``stream``: a STREAM-like triad ``a = b + s*c`` (McCalpin's STREAM "Triad", 3 arrays of 8-byte
  floats moved per element: 24 B/element), 2 + 5 iterations over 2²⁴ elements (GPU with torch,
  else numpy), GB/s = 24·n·iters / s / 1e9.
- ``gpu_clocks``: the SM clock, its maximum, power draw and power cap read with ``nvidia-smi
  --query-gpu`` (or ``rocm-smi``); on a node without either it reports an error.

A probe that cannot run is never an exception for the caller: :func:`run_probe` returns
``{"ran": False, "reason": "not run: no cluster"}`` when ``srun``/``sinfo`` are missing or the
job's nodes are not nodes of the reachable cluster (the reason is one fixed text so a result does
not depend on which of these held), and ``{"ran": False, "reason": "not run: <why>"}`` for a
failed srun.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any, Literal, Sequence

from ..errors import Ai4sError, InputError
from . import client

__all__ = ["CHECKS", "NO_CLUSTER", "run_probe", "cluster_nodes", "probe_node"]

NO_CLUSTER = "not run: no cluster"

_COMMON = r'''
import json, sys, time
check = sys.argv[1]
out = {"check": check}
try:
    import torch
    gpu = torch.cuda.is_available()
except Exception:
    torch, gpu = None, False
out["device"] = torch.cuda.get_device_name(0) if gpu else "cpu"
'''

_MATMUL = _COMMON + r'''
if gpu:
    n, warm, iters = 4096, 3, 10
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16); b = torch.randn_like(a)
    for _ in range(warm): a @ b
    torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(iters): a @ b
    torch.cuda.synchronize(); dt = time.perf_counter() - t
    out["dtype"] = "bf16"
else:
    import numpy as np
    n, warm, iters = 1024, 2, 5
    a = np.random.rand(n, n).astype(np.float32); b = np.random.rand(n, n).astype(np.float32)
    for _ in range(warm): a @ b
    t = time.perf_counter()
    for _ in range(iters): a @ b
    dt = time.perf_counter() - t
    out["dtype"] = "float32"
out.update(n=n, iters=iters, seconds=dt, tflops=2.0 * n ** 3 * iters / dt / 1e12, unit="TFLOP/s")
print(json.dumps(out))
'''

_STREAM = _COMMON + r'''
n, warm, iters, s = 1 << 24, 2, 5, 3.0
if gpu:
    b = torch.rand(n, device="cuda", dtype=torch.float64); c = torch.rand_like(b)
    for _ in range(warm): a = b + s * c
    torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(iters): a = b + s * c
    torch.cuda.synchronize(); dt = time.perf_counter() - t
else:
    import numpy as np
    b = np.random.rand(n); c = np.random.rand(n); a = np.empty_like(b)
    for _ in range(warm): np.add(b, s * c, out=a)
    t = time.perf_counter()
    for _ in range(iters): np.add(b, s * c, out=a)
    dt = time.perf_counter() - t
out.update(n=n, iters=iters, seconds=dt, triad_gbps=24.0 * n * iters / dt / 1e9, unit="GB/s")
print(json.dumps(out))
'''

_CLOCKS = r'''
import json, shutil, subprocess, sys
out = {"check": "gpu_clocks"}
if shutil.which("nvidia-smi"):
    q = "name,clocks.sm,clocks.max.sm,power.draw,power.limit"
    r = subprocess.run(["nvidia-smi", "--query-gpu=" + q, "--format=csv,noheader,nounits"],
                       capture_output=True, text=True, timeout=60)
    gpus = []
    for line in r.stdout.strip().splitlines():
        f = [x.strip() for x in line.split(",")]
        num = lambda x: float(x) if x.replace(".", "", 1).isdigit() else None
        gpus.append({"name": f[0], "sm_clock_mhz": num(f[1]), "sm_clock_max_mhz": num(f[2]),
                     "power_w": num(f[3]), "power_cap_w": num(f[4])})
    out["gpus"] = gpus
elif shutil.which("rocm-smi"):
    r = subprocess.run(["rocm-smi", "--showclocks", "--showpower", "--showmaxpower", "--json"],
                       capture_output=True, text=True, timeout=60)
    out["rocm_smi"] = json.loads(r.stdout or "{}")
else:
    out["error"] = "no nvidia-smi or rocm-smi on the node (no GPU to read)"
print(json.dumps(out))
'''

#: The named checks: name -> (script, what it measures).
CHECKS: dict[str, tuple[str, str]] = {
    "matmul": (_MATMUL, "short GEMM throughput (TFLOP/s): bf16 4096^3 on a GPU, float32 1024^3 on CPU"),
    "stream": (_STREAM, "STREAM-like triad bandwidth (GB/s), 2^24 float64 elements"),
    "gpu_clocks": (_CLOCKS, "SM clock, max SM clock, power draw and power cap (nvidia-smi/rocm-smi)"),
}

Check = Literal["matmul", "stream", "gpu_clocks"]


def cluster_nodes(timeout_s: float = 20) -> set[str] | None:
    """Node names of the reachable SLURM cluster (``sinfo -h -N -o %N``), or None when ``sinfo``
    or ``srun`` is missing or does not answer."""
    if not shutil.which("sinfo") or not shutil.which("srun"):
        return None
    try:
        cp = subprocess.run(["sinfo", "-h", "-N", "-o", "%N"], capture_output=True, text=True, timeout=timeout_s)
    except (subprocess.TimeoutExpired, OSError):
        return None
    if cp.returncode != 0:
        return None
    return {x.strip() for x in cp.stdout.split() if x.strip()}


def probe_node(job_nodes: Sequence[str], available: set[str] | None) -> str | None:
    """The first of the job's nodes that the cluster has, or None (no cluster, or none of them)."""
    if not available:
        return None
    return next((n for n in job_nodes if n in available), None)


def run_probe(check: str, job_nodes: Sequence[str], cluster: client.ClusterConfig | None = None, *,
              timeout_s: float = 330) -> dict[str, Any]:
    """Run the named ``check`` (a key of :data:`CHECKS`) with ``srun -N1 -n1 --time=00:05:00
    --nodelist=<node>`` on one of ``job_nodes`` (the manifest's ``nodes_list``).

    Returns ``{"ran": True, "check", "node", "command", "result": {...the check's JSON...}}`` or
    ``{"ran": False, "check", "reason"}`` (:data:`NO_CLUSTER` when no cluster is reachable or the
    job's nodes are not in it; ``"not run: srun failed (rc=N): <last line>"`` otherwise).
    ``command`` is the srun argv with the script elided. ``cluster`` None: read
    ``.cluster-config.yaml`` (:func:`client.load_cluster_config`), else partition ``debug``.
    Raises :class:`InputError` only for an unknown check name."""
    if check not in CHECKS:
        raise InputError(f"unknown probe check {check!r}; checks: {', '.join(CHECKS)}")
    node = probe_node(list(job_nodes), cluster_nodes())
    if node is None:
        return {"ran": False, "check": check, "reason": NO_CLUSTER}
    if cluster is None:
        try:
            cluster = client.load_cluster_config(None)
        except InputError:
            cluster = client.ClusterConfig(shared_dir="")
    script = CHECKS[check][0]
    argv = [cluster.python, "-c", script, check]
    try:
        cp = client.srun_probe(argv, cluster, timeout_s=timeout_s, node=node)
    except Ai4sError as e:
        return {"ran": False, "check": check, "node": node, "reason": f"not run: {e}"}
    shown = ["srun", "-N1", "-n1", "--time=00:05:00", f"--partition={cluster.partition}",
             *([f"--account={cluster.account}"] if cluster.account else []), f"--nodelist={node}",
             cluster.python, "-c", f"<{check} script>", check]
    if cp.returncode != 0:
        last = (cp.stderr or cp.stdout or "no output").strip().splitlines()[-1:] or ["no output"]
        return {"ran": False, "check": check, "node": node, "command": " ".join(shown),
                "reason": f"not run: srun failed (rc={cp.returncode}): {last[0][:200]}"}
    lines = [x for x in cp.stdout.splitlines() if x.startswith("{")]
    try:
        result = json.loads(lines[-1]) if lines else {"error": "the check printed no JSON"}
    except ValueError:
        result = {"error": "the check printed malformed JSON"}
    return {"ran": True, "check": check, "node": node, "command": " ".join(shown), "result": result}


#: Telemetry metrics the ``gpu_clocks`` probe measures directly: claim metric -> (probe field, unit).
PROBED_METRICS = {"telemetry.sm_clock.max": ("sm_clock_max_mhz", "MHz"), "telemetry.power.max": ("power_cap_w", "W")}


def probe_verdicts(verdicts: list[Any], job_nodes: Sequence[str], cluster: client.ClusterConfig | None = None) -> list[Any]:
    """The deterministic verifiers' use of the probe (``ai4s-graph run --probe``): one ``gpu_clocks``
    check on one of the job's nodes, attached to the verdicts on :data:`PROBED_METRICS` (the job's
    observed maximum SM clock and power) as evidence and a note with the node's own maximum SM clock
    and power cap. An observed maximum above the node's capability (by more than 2 %, the verifiers'
    relative tolerance, state/claimkit.REL_TOL) is noted as a contradiction between sources;
    the verdict itself is not changed. Verdicts are :class:`~ai4s_graph.state.VerifiedClaim`;
    returns new ones (same order). Never raises: a probe that cannot run is noted as such."""
    from ...state import Evidence

    targets = [i for i, v in enumerate(verdicts) if v.claim.metric in PROBED_METRICS]
    if not targets:
        return list(verdicts)
    res = run_probe("gpu_clocks", job_nodes, cluster)
    ev = Evidence(tool="slurm.srun_probe", query=res.get("command") or "srun -N1 --time=00:05:00 gpu_clocks",
                  returned=res, args={"check": "gpu_clocks", "node": res.get("node")})
    gpus = ((res.get("result") or {}).get("gpus") or []) if res.get("ran") else []
    out = list(verdicts)
    for i in targets:
        v = verdicts[i]
        field, unit = PROBED_METRICS[v.claim.metric]
        caps = [g.get(field) for g in gpus if isinstance(g.get(field), (int, float))]
        if not res.get("ran"):
            note = f"node probe: {res['reason']}"
        elif not caps:
            note = f"node probe on {res['node']}: {(res.get('result') or {}).get('error') or 'no ' + field}"
        else:
            cap = max(caps)
            note = f"node probe on {res['node']}: {field} {cap:g} {unit}"
            if isinstance(v.claim.value, (int, float)) and float(v.claim.value) > cap * 1.02:
                note += f"; contradiction: the job's observed maximum {float(v.claim.value):g} {unit} is above it"
        out[i] = v.model_copy(update={"evidence": [*v.evidence, ev],
                                      "note": f"{v.note}; {note}" if v.note else note})
    return out
