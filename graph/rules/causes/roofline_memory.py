"""Memory-bound op categories by the roofline (seed 001 T15): a category whose arithmetic
intensity (FLOP per byte moved, from the recorded shapes) is below the GPU's ridge point is bound
by HBM bandwidth; its claim is the bandwidth it achieves, with the share of the datasheet peak.

Detects from the trace's roofline (kernels linked to their ops by External id, computed in the
analysis pass); re-derived from the roofline with kernels linked by correlation id (the same
pass's collector, another link). Lever ``torch_compile`` (the catalog's id, ``tools/levers/catalogs/
workload.yaml``: Inductor fuses the elementwise chains of any PyTorch job), saving from the
memory-lever model of ``tools/levers/impact.py`` (bytes at peak vs at the achieved bandwidth)."""

from __future__ import annotations

from .base import Cause, Finding, LeverSpec, file_name
from ..figures import Figure, Inputs, Reader, Rederived
from ....state import Claim, Evidence, Tolerance

ROOFLINE_MEMORY_CATEGORIES = ("elementwise", "normalization", "reduction", "GEMM", "CONV", "SDPA")
"""The roofline's categories (tools/perfmodel/roofline.py); any of them can be memory-bound."""
ELEMENTWISE = ("elementwise", "normalization", "reduction")


FUSE_WHY = ("wrap the model in torch.compile(model) (Inductor fuses chains of elementwise/normalization ops into one "
            "kernel that reads and writes the tensor once), or move fewer bytes (bf16 activations)")


class RooflineMemoryBound(Cause):
    """Op categories whose arithmetic intensity is below the ridge (seed 001 T15)."""

    seed = "seed 001 T15"
    causes = {"memory-bound-elementwise": "elementwise/normalization/reduction kernels bound by HBM bandwidth",
              "memory-bound-kernels": "matrix or attention kernels whose shapes make them bandwidth-bound"}
    analyst = "trace_analyst"
    explains = "memory-bound"  # class-level: named only for a memory-bound job (base.Cause.explains)
    reads = ("roofline", "rank", "manifest")
    figures = (Figure("roofline.{category}.tbps", "TB/s", "bandwidth a memory-bound roofline category achieves",
                      "cause", Tolerance(rel=0.01)),)
    constants = {}
    levers = (LeverSpec("torch_compile", FUSE_WHY, saving="torch_compile"),)

    def detect(self, x: Inputs) -> list[Finding]:
        rf = x.roofline
        if not rf or not rf.get("shapes_recorded") or not x.rank:
            return []
        path, rank = str(x.rank["path"]), x.rank.get("rank")
        gpu = rf.get("gpu")  # the datasheet row the roofline read (the trace's device, else the manifest's)
        out = []
        for cat, a in rf["categories"].items():
            if a["bound"] != "memory" or not a["kernel_us"]:
                continue
            e = Evidence(tool="perfmodel.roofline", query=f"{file_name(path)}: {cat} bytes / kernel time",
                         returned={"bytes": a["bytes"], "kernel_us": a["kernel_us"], "intensity": a["intensity"],
                                   "ridge": a["ridge"], "tbps": round(a["tbps"], 4)},
                         args={"path": path, "rank": rank, "gpu": gpu, "category": cat})
            head = (f"{cat} is memory-bound by the roofline: {a['intensity']:.1f} FLOP/B below the {rf['gpu']} ridge "
                    f"of {a['ridge']:.0f} FLOP/B; ")
            if a.get("above_peak_bw"):  # the shape model and the kernel time contradict each other
                text = (head + f"its modelled bytes over {a['kernel_us'] / 1000:.2f} ms of kernels would be "
                        f"{a['tbps']:.3f} TB/s, above the {rf['hbm_tbps']:.2f} TB/s HBM peak: the byte model over-counts "
                        "this category's traffic (operands served from L2 or broadcast), so the figure is an upper "
                        "bound of the bytes, not an achieved bandwidth")
            else:
                text = (head + f"it moves {a['tbps']:.3f} TB/s, {a['pct_peak_bw']:.0f}% of the "
                        f"{rf['hbm_tbps']:.2f} TB/s peak, over {a['kernel_us'] / 1000:.2f} ms of kernels")
            c = self.claim(f"triage.roofline.{cat.lower()}", text, f"roofline.{cat}.tbps", round(a["tbps"], 4), "TB/s",
                           [e], 0.5 if a.get("above_peak_bw") else 0.8)
            cause = "memory-bound-elementwise" if cat in ELEMENTWISE else "memory-bound-kernels"
            out.append(Finding((cause,), c, (self.lever("torch_compile"),)))
        return out

    def rederive(self, c: Claim, r: Reader) -> Rederived:
        method = "roofline with kernels linked by correlation id"
        rf = (r.rank or {}).get("roofline_correlation_rf")
        cat = (c.evidence[0].args or {}).get("category") if c.evidence else None
        if rf is None:
            return Rederived(None, method, Tolerance(rel=0.01))
        a = rf["categories"].get(cat, {})
        return Rederived(round(a["tbps"], 4) if a else None, method, Tolerance(rel=0.01))


CAUSE = RooflineMemoryBound()
