"""A slow link (seed 001 T23, "Inter-node transport"; issue 24): the collectives move their bytes
far slower than the GPUs' link can, e.g. with ``NCCL_P2P_DISABLE=1`` an intra-node all-reduce goes
through host shared memory instead of NVLink.

Detects from the cross-rank collectives report of the analysis passes (``Inputs.collectives``:
each collective group's summed latency -- the shortest duration across ranks, the transfer without
the early ranks' wait -- and its busbw, nccl-tests ``doc/PERFORMANCE.md``) and the one GPU datasheet
(:mod:`ai4s_graph.tools.perfmodel.datasheet`: the GPU-to-GPU link, one direction, the ceiling of
an intra-node busbw). The figure is the **link ratio**: the time-weighted mean of busbw / link
bandwidth over the groups, Σ latency_g · busbw_g / link / Σ latency_g = the time the collectives
would need at the link's speed over the time they took. Single-node jobs only (the datasheet's
link is the intra-node fabric; a multi-node job's fabric is compared with the cluster's own
measurement, ``--baseline``, in the report's busbw section). The job's communication variables
that restrict the transport (:data:`RESTRICTING`) are the evidence of why.

Re-derived from the verifier's own cross-rank summary of the ranks' communication kernels as the
full-load reader loaded them (:func:`ai4s_graph.tools.trace.crossrank_check.collective_summary`:
sizes from each kernel's own ``In msg nelems`` and dtype). Levers ``enable_p2p`` (when the job
disables the peer-to-peer transport) and ``nccl_env``."""

from __future__ import annotations

from typing import Any

from .base import Cause, Constant, Finding, LeverSpec, ev
from ..figures import Figure, Inputs, Reader, Rederived, returned_dicts
from ....state import Claim, Tolerance
from ....tools.perfmodel.datasheet import find_gpu

SLOW_LINK_FRAC = Constant(0.2, "measurement, bundled 2x H200 runs (reports/raw-2026-11-30-2gpu): NCCL_P2P_DISABLE=1 "
                               "(93002) link ratio 0.06 (26.9 GB/s at 64 MiB against the 450 GB/s NVLink 4 of the "
                               "datasheet; the eval-cluster sweep with P2P disabled gives 28 GB/s there), NVLink runs "
                               "0.59 (93001, 64 MiB) and 0.39-0.40 (93003/93004, 32 MiB buckets): 0.2 is 3x above the "
                               "one and 2x below the others; 0.2 x 450 = 90 GB/s, above PCIe Gen5 x16 (~63 GB/s, seed "
                               "003 Network) -- slower than that the bytes do not cross NVLink")
SHARE_MIN = Constant(0.05, "a slow link that costs under 5% of the step (its collectives hidden behind compute) is a "
                           "claim, not the job's cause (the same floor as the host-side causes: allocator_churn, "
                           "gc_pause)")
RESTRICTING = {"NCCL_P2P_DISABLE": ("1",), "NCCL_P2P_LEVEL": ("LOC", "0"), "NCCL_SHM_DISABLE": ("1",),
               "NCCL_IB_DISABLE": ("1",), "NCCL_NET": ("Socket", "socket")}
"""Communication variables and the values that keep collectives off the fast transport (NCCL User
Guide, "Environment Variables"; RCCL reads the same names)."""
CLAIM_ID = "triage.t23.slow_link"


def restricting(env: dict[str, Any] | None) -> dict[str, str]:
    """The variables of ``env`` set to a value of :data:`RESTRICTING`."""
    return {k: str(v) for k, v in (env or {}).items() if str(v).strip() in RESTRICTING.get(k, ())}


def link_ratio(groups: list[dict[str, Any]], link_gbps: float, latency_key: str = "total_latency_us") -> float | None:
    """Σ latency · busbw / ``link_gbps`` / Σ latency over the groups with a busbw and a latency
    (``latency_key``: µs); None when none has both or the link is unknown."""
    rows = [(float(g[latency_key]), float(g["busbw_gbps"])) for g in groups or []
            if g.get("busbw_gbps") and g.get(latency_key)]
    total = sum(t for t, _ in rows)
    if not rows or not total or not link_gbps:
        return None
    return sum(t * bw for t, bw in rows) / link_gbps / total


def least_exposed(per_rank: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The rank row of the cross-rank report with the least exposed communication (% of its
    window): every rank spends at least that in collectives not hidden behind compute, so none of
    it can be waiting for a late rank on every rank at once. None without two ranks."""
    rows = [p for p in per_rank or [] if isinstance(p.get("exposed_comm_pct"), (int, float)) and p.get("total_us")]
    return min(rows, key=lambda p: (p["exposed_comm_pct"], p["rank"])) if len(rows) >= 2 else None


def from_evidence(returned: list[Any]) -> float | None:
    """The claim's link ratio from what its evidence returned (rounded as claimed)."""
    d = returned_dicts(returned)
    v = link_ratio(d.get("groups") or [], float(d.get("link_gbps") or 0.0))
    return None if v is None else round(v, 3)


class SlowLink(Cause):
    """Collectives far under the GPUs' link speed (busbw against the datasheet link)."""

    seed = "seed 001 T23; nccl-tests doc/PERFORMANCE.md; NCCL User Guide (environment variables)"
    causes = {"slow-link": "the collectives run far under the link's bandwidth (P2P disabled, a socket transport)"}
    reads = ("collectives", "manifest", "env")
    figures = (Figure("slow_link.link_ratio", "ratio", "time-weighted busbw of the collectives over the datasheet link",
                      "cause", Tolerance(rel=0.05), from_evidence=from_evidence),)
    constants = {"SLOW_LINK_FRAC": SLOW_LINK_FRAC, "SHARE_MIN": SHARE_MIN}
    levers = (LeverSpec("enable_p2p", "let NCCL use the peer-to-peer transport: unset NCCL_P2P_DISABLE (or set it to 0) "
                        "and NCCL_P2P_LEVEL, so collectives between GPUs of a node go over NVLink",
                        when=lambda x: any(k.startswith("NCCL_P2P") for k in restricting(x.env))),
              LeverSpec("nccl_env", "check the fabric and the communication variables (NCCL_IB_DISABLE, NCCL_NET, "
                        "NCCL_SOCKET_IFNAME, NIC/GID consistency: lesson 26) against the cluster's measured busbw "
                        "(eval-cluster)"))
    verifier_needs = ("ranks",)

    def assess(self, x: Inputs) -> dict[str, Any] | None:
        """``{"ratio", "link_gbps", "link", "groups", "pacing", "share"}`` for a single-node job
        with collectives (``share`` = the least exposed rank's exposed communication x (1 - ratio):
        the part of it a link at full speed would not spend); None without the inputs."""
        spec = find_gpu((x.manifest.gpu if x.manifest is not None else None) or "")
        nodes = x.manifest.num_nodes if x.manifest is not None else None
        groups = (x.collectives or {}).get("groups") or []
        pacing = least_exposed((x.collectives or {}).get("per_rank") or [])
        if spec is None or (nodes or 1) > 1 or pacing is None:
            return None
        ratio = link_ratio(groups, spec.link_gbps_uni)
        if ratio is None:
            return None
        share = float(pacing["exposed_comm_us"]) / float(pacing["total_us"]) * max(0.0, 1.0 - ratio)
        return {"ratio": ratio, "link_gbps": spec.link_gbps_uni, "link": spec.link_source or spec.link,
                "groups": groups, "pacing": pacing, "share": share}

    def detect(self, x: Inputs) -> list[Finding]:
        a = self.assess(x)
        if a is None or a["ratio"] >= SLOW_LINK_FRAC.value or a["share"] < SHARE_MIN.value:
            return []
        env = restricting(x.env)
        top = max(a["groups"], key=lambda g: float(g.get("total_latency_us") or 0.0))
        why = f"; the job sets {', '.join(f'{k}={v}' for k, v in env.items())}" if env else ""
        rows = [{k: g.get(k) for k in ("collective", "msg_bytes", "count", "total_latency_us", "busbw_gbps")}
                for g in a["groups"]]
        c = self.claim(CLAIM_ID,
                       f"collectives at {a['ratio']:.2f}x the link's bandwidth ({top['collective']} of "
                       f"{float(top['msg_bytes']) / 2**20:.3g} MiB at {float(top['busbw_gbps']):.1f} GB/s busbw against "
                       f"{a['link_gbps']:.0f} GB/s, {a['link']}){why}: a slow link, rank {a['pacing']['rank']} still "
                       f"spends {a['pacing']['exposed_comm_pct']:.1f}% of its window in exposed communication",
                       "slow_link.link_ratio", round(a["ratio"], 3), "ratio",
                       [ev("collectives.build_report", "groups: summed latency and busbw", {"groups": rows},
                           ranks=[p.get("rank") for p in (x.collectives or {}).get("per_rank") or []]),
                        ev("datasheet", "GPU-to-GPU link, one direction", {"link_gbps": a["link_gbps"]}),
                        ev("job.env", "communication variables that restrict the transport", env)], 0.75)
        return [Finding(("slow-link",), c, (self.lever("enable_p2p"), self.lever("nccl_env")),
                        share=round(a["share"], 4))]

    def rederive(self, c: Claim, r: Reader) -> Rederived:
        link = returned_dicts([e.returned for e in c.evidence if e.tool == "datasheet"]).get("link_gbps")
        v = link_ratio((r.collectives or {}).get("groups") or [], float(link or 0.0), latency_key="latency_us")
        if v is None:
            return Rederived(None, "no independent path for this triage claim", Tolerance())
        return Rederived(round(v, 3), "busbw and latency of every collective re-derived from each rank's kernels by the "
                         "full-load reader (their own message sizes), over the datasheet link", Tolerance(rel=0.05))

    def not_checked(self, x: Inputs) -> list[str]:
        if (x.collectives or {}).get("groups") and x.manifest is not None and (x.manifest.num_nodes or 1) > 1:
            return ["not checked: slow link: needs the cluster's measured busbw for a multi-node job (the datasheet "
                    "link is the intra-node fabric)"]
        return []


CAUSE = SlowLink()
