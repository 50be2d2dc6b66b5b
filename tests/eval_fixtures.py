"""Hand-built eval results for the report builder and checker tests.

``h200_eval()`` is the real device run (reports/raw-2026-11-29/eval-vm.json, 1 node of 1x H200).
``two_node_eval()`` derives from it a 2-node, 2-GPU-per-node eval whose answers are known by
construction: DCGM passes, node1's gpu1 is 4-5% under its node's median in all three lemon passes
(so it is the one under-performing GPU), intra-node and inter-node all-reduce sweeps, an NFS share
8-10x slower than the local disk.
``collectives_2gpu()`` is a 2-GPU sweep of all-reduce / all-gather / reduce-scatter, with NVLink
and with peer-to-peer disabled (``NCCL_P2P_DISABLE=1``), in the shape ``gpu_bench`` writes.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RAW = REPO / "reports" / "raw-2026-11-29" / "eval-vm.json"


def h200_eval() -> dict:
    return json.loads(RAW.read_text())


def _ar_rows(peak: float, n: int) -> list[dict]:
    rows = []
    for i, b in enumerate([32 << 10, 256 << 10, 2 << 20, 16 << 20, 128 << 20, 1 << 30]):
        bus = round(peak * min(1.0, 0.05 * 2.6 ** i), 1)
        alg = round(bus * n / (2 * (n - 1)), 1)
        rows.append({"bytes": b, "time_us": round(b / (alg * 1e3), 1), "algbw_gbps": alg, "busbw_gbps": bus, "correct": True})
    return rows


def two_node_eval() -> list[dict]:
    base = h200_eval()
    out = []
    for i, host in enumerate(["gpu-a", "gpu-b"]):
        d = copy.deepcopy(base)
        d["node"] = host
        d["env"]["hostname"] = host
        g0 = d["env"]["gpus"][0]
        d["env"]["gpus"] = [dict(g0, index=0), dict(g0, index=1)]
        d["env"]["topo"] = "GPU0 X NV18\nGPU1 NV18 X"
        d["env"]["ib_devices"] = [{"name": "mlx5_0", "rate": "400 Gb/sec (4X NDR)"}]
        d["env"]["nccl_env"] = {"NCCL_NVLS_ENABLE": "2", "NCCL_IB_HCA": "mlx5"}
        c = d["compute"]
        c["dcgm"] = {"ran": True, "failed": []}
        c["msmf"]["siblings_busy"] = True
        c["msmf"]["per_gpu"] = [{"gpu": 0, "tflops": 697.5, "power_w": 691.0, "sm_mhz": 1470, "idle_siblings": []},
                                {"gpu": 1, "tflops": 690.2 if i == 0 else 662.0, "power_w": 690.0, "sm_mhz": 1465,
                                 "idle_siblings": []}]
        if i == 0:
            passes = [[680.9, 679.0], [679.5, 681.2], [683.3, 682.0]]
            slow: list[int] = []
            meds = [679.95, 680.35, 682.65]
        else:
            passes = [[681.0, 650.1], [680.2, 648.0], [682.4, 652.3]]
            slow = [1]
            meds = [665.55, 664.1, 667.35]
        c["lemon"].update(passes=passes, medians=meds, slow=slow, dead=[])
        d["network"] = {"intra": {"ranks": 2, "rows": _ar_rows(375.0, 2)}}
        shared = copy.deepcopy(d["storage"]["local"][0])
        shared["path"] = "/data/scratch"
        shared["fs"] = {"mount": "/data", "type": "nfs", "size_bytes": 20 * (1 << 40), "source": "10.0.0.5:/export/data"}
        for r, f in zip(shared["rows"], [9.5, 8.1, 9.0, 8.4, 10.2, 8.8]):
            r["bw_mibps"] = round(r["bw_mibps"] / f, 1)
            r["iops_m"] = round(r["iops_m"] / f, 4)
            r["latency_msec"] = round(r["latency_msec"] * f, 3)
        d["storage"]["shared"] = [shared]
        out.append(d)
    return out


def two_node_inter() -> dict:
    return {"ranks": 4, "rows": _ar_rows(180.0, 4)}


def collectives_2gpu() -> dict:
    """``network.collectives`` of a 2-GPU node as ``gpu_bench.collectives_contrast`` writes it:
    3 collectives x (``p2p`` over NVLink, ``p2p_disabled`` with ``NCCL_P2P_DISABLE=1``)."""
    base = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
    out = {}
    for label, peak, env in (("p2p", 375.0, base), ("p2p_disabled", 41.0, dict(base, NCCL_P2P_DISABLE="1"))):
        rows = []
        for coll, f in (("all_reduce", 1.0), ("all_gather", 0.9), ("reduce_scatter", 0.88)):
            for r in _ar_rows(peak * f, 2):
                if coll != "all_reduce":  # all-gather / reduce-scatter: busbw = algbw x (n-1)/n
                    r["algbw_gbps"] = round(r["busbw_gbps"] * 2, 1)
                rows.append(dict(r, op=coll))
        out[label] = {"ranks": 2, "env": env, "rows": rows}
    return out
