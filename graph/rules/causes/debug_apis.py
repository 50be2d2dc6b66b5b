"""Debug APIs left on (seed 001 T12): autograd anomaly detection (``aten::isnan`` on at least
half as many events as there are backward nodes, ``autograd::engine::evaluate_function``: anomaly
mode checks every backward node's outputs for NaN, torch/csrc/autograd/engine.cpp), or a
launch-serializing / allocator-disabling variable of :data:`DEBUG_ENV` in the job's environment.

Detects from the trace's event-name counts and the job's environment (job script, then the
manifest); re-derived from raw-text counts of the same trace. Levers: ``anomaly_detection_off`` for anomaly
mode, ``launch_blocking_off`` for a launch-serializing variable (the lever ids of
``tools/levers/catalogs/workload.yaml``).

Finding ``share`` (None without the step accounting): for anomaly mode, the summed ``dur`` of its
checks (``aten::isnan``, ``aten::any``, ``aten::item``: ``torch/csrc/autograd/engine.cpp`` checks each
backward node's outputs with ``isnan().any().item()``, the sync included) per step of the trace over
the accounting's mean wall time; for a launch-serializing variable, the host time in launch calls
over the step (each launch waits for its kernel); their sum when both, at most 1."""

from __future__ import annotations

from typing import Any

from .base import Cause, Constant, Finding, LeverSpec, ev, file_name
from ..step_budget import budget, mean_wall_us, share
from ..figures import Figure, Inputs, Reader, Rederived
from ....state import Claim, Tolerance

ISNAN = "aten::isnan"
CHECK_OPS = (ISNAN, "aten::any", "aten::item")
"""The ops of anomaly mode's check of a backward node's outputs (``isnan().any().item()``)."""
BACKWARD = "autograd::engine::evaluate_function"
ANOMALY_ISNAN_PER_BACKWARD = 0.5
DEBUG_ENV = {"CUDA_LAUNCH_BLOCKING": "1", "HIP_LAUNCH_BLOCKING": "1", "PYTORCH_NO_CUDA_MEMORY_CACHING": "1",
             "PYTORCH_NO_HIP_MEMORY_CACHING": "1"}
"""Variables that serialize every launch or disable the caching allocator (seed 001 T12; lesson 21
on HIP_LAUNCH_BLOCKING)."""
CLAIM_ID = "triage.t12.debug_apis"


def anomaly_on(isnan: int, backward: int) -> bool:
    """Anomaly mode's signature: at least :data:`ANOMALY_ISNAN_PER_BACKWARD` ``aten::isnan`` per
    backward node (and some backward node)."""
    return backward > 0 and isnan >= ANOMALY_ISNAN_PER_BACKWARD * backward


def debug_vars(env: dict[str, Any] | None) -> dict[str, Any]:
    """The variables of ``env`` set to their debug value (:data:`DEBUG_ENV`)."""
    return {k: v for k, v in (env or {}).items() if DEBUG_ENV.get(k) == str(v).strip()}


def from_evidence(returned: list[Any]) -> bool:
    """``debug_apis_on`` from what the claim's evidence returned: the isnan / backward-node counts
    pass :func:`anomaly_on`, or a returned environment holds a debug variable."""
    for r in returned:
        if not isinstance(r, dict):
            continue
        if "isnan" in r and "backward_nodes" in r:
            if anomaly_on(int(r["isnan"]), int(r["backward_nodes"])):
                return True
        elif debug_vars(r):
            return True
    return False


class DebugApis(Cause):
    """Anomaly mode or a launch-serializing variable left on (seed 001 T12)."""

    seed = "seed 001 T12; seed 000 lesson 21"
    causes = {"anomaly-mode": "torch.autograd.set_detect_anomaly(True) left on: a NaN check on every backward node",
              "cuda-launch-blocking": "CUDA_LAUNCH_BLOCKING=1 (or HIP_LAUNCH_BLOCKING=1) makes every launch wait for "
                                      "its kernel"}
    analyst = "trace_analyst"
    reads = ("event_names", "env", "rank")
    figures = (Figure("debug_apis_on", "bool", "anomaly detection or a launch-serializing variable is on", "cause",
                      Tolerance(), from_evidence=from_evidence),)
    constants = {"ANOMALY_ISNAN_PER_BACKWARD": Constant(ANOMALY_ISNAN_PER_BACKWARD, "anomaly mode checks every backward "
                                                        "node's outputs for NaN (torch/csrc/autograd/engine.cpp)")}
    levers = (LeverSpec("anomaly_detection_off", "call torch.autograd.set_detect_anomaly(False) (or drop the "
                        "detect_anomaly() context) for the real run: it adds a NaN check and a host sync after every "
                        "backward node"),
              LeverSpec("launch_blocking_off", "unset CUDA_LAUNCH_BLOCKING / HIP_LAUNCH_BLOCKING (or set it to 0) for "
                        "the real run: with it every kernel launch waits for its kernel to finish"))
    event_names = CHECK_OPS
    event_name_patterns = ()
    raw_patterns = {"isnan": r'aten::isnan"', "backward": BACKWARD}

    def wants_name(self, name: str) -> bool:
        return name in CHECK_OPS or name.startswith(BACKWARD)

    def detect(self, x: Inputs) -> list[Finding]:
        if not x.rank:
            return []
        bw = sum(v for k, v in x.event_names.items() if k.startswith(BACKWARD))
        isnan = x.event_names.get(ISNAN, 0)
        anomaly = anomaly_on(isnan, bw)
        bad_env = debug_vars(x.env)
        if not anomaly and not bad_env:
            return []
        path, rank = str(x.rank["path"]), x.rank.get("rank")
        evidence, parts, causes, levers = [], [], [], []
        if anomaly:
            evidence.append(ev("trace.event_names", f"{file_name(path)}: {ISNAN} / {BACKWARD}",
                               {"isnan": isnan, "backward_nodes": bw}, path=path, rank=rank))
            parts.append(f"{isnan} {ISNAN} checks for {bw} backward nodes: torch.autograd anomaly detection is on")
            causes.append("anomaly-mode")
            levers.append(self.lever("anomaly_detection_off"))
        if bad_env:
            evidence.append(ev("manifest.env", "debug variables", bad_env, rank=rank, path=path))
            parts.append(", ".join(f"{k}={v}" for k, v in bad_env.items()) + " serializes every launch")
            causes.append("cuda-launch-blocking")
            levers.append(self.lever("launch_blocking_off"))
        c = self.claim(CLAIM_ID, "; ".join(parts) + " (seed 001 T12)", "debug_apis_on", True, "bool", evidence, 0.85)
        return [Finding(tuple(causes), c, tuple(levers), share=self._share(x, anomaly, bool(bad_env)))]

    @staticmethod
    def _share(x: Inputs, anomaly: bool, bad_env: bool) -> float | None:
        b = budget(x)
        steps = int((x.rank or {}).get("n_steps") or 0)
        wall = mean_wall_us(b) if b is not None else 0.0
        if wall <= 0 or steps <= 0:
            return None
        durs = (x.rank or {}).get("name_dur_us") or {}
        sh = sum(float(durs.get(k, 0.0)) for k in CHECK_OPS) / steps / wall if anomaly else 0.0
        if bad_env:
            sh += share(b, "host", "launch")
        return min(1.0, sh)

    def rederive(self, c: Claim, r: Reader) -> Rederived:
        raw = (r.rank or {}).get("raw_counts") or {}
        if "isnan" not in raw or "backward" not in raw:
            return Rederived(None, "no independent path for this triage claim", Tolerance())
        env_ev = next((e.returned for e in c.evidence if e.tool == "manifest.env"), None)
        return Rederived(bool(env_ev) or anomaly_on(raw["isnan"], raw["backward"]), "raw-text counts of aten::isnan "
                         "and backward nodes", Tolerance())


CAUSE = DebugApis()
