"""Seed 001's triage checks that the bottleneck classes do not cover, as claims with evidence, each
with the lever it adds to the report and a re-derivation a verifier runs through another path.

Pure functions over what the analysts already hold (a rank's trace file, telemetry figures, the
manifest, the job script, the log text):

- T3 thread/worker oversubscription: DataLoader workers x ranks per node vs the cores the job may
  use (seed 000 lesson 22: 8 workers x 8 ranks = 64 processes on 56 CPUs regressed 5.6%);
- T8 data-bound split: CPU-transform-bound (host CPU busy) vs I/O-bound (host CPU idle);
- T14 silent SDPA fallback to the math kernel (``aten::_scaled_dot_product_attention_math`` in the
  trace; lesson 21: MATH is 10-15x slower than EFFICIENT);
- T16 torch.compile recompilations (compile events inside the profiled steps; ``Recompiling
  function`` / ``recompile_limit`` in the log);
- T12 debug APIs left on: anomaly mode's per-backward-node ``aten::isnan`` checks, and
  ``CUDA_LAUNCH_BLOCKING=1`` / ``HIP_LAUNCH_BLOCKING=1`` in the environment;
- T2 telemetry clocks and power against the datasheet (power-capped throttling vs a starved GPU).

Each ``check_*`` returns a :class:`TriageFinding` (``claim`` dict, ``lever``, ``why``) or None.
"""

from __future__ import annotations

import gzip
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...state.claims import Evidence
from ...tools.perfmodel.datasheet import find_gpu
from ...tools.trace.kineto import read_trace_json
from .claimkit import claim

CPU_BUSY_PCT = 90.0      # seed 001 T1: "util consistently >90%" is busy; T3: a worker pegged at ~100% CPU
CPU_IDLE_PCT = 50.0      # seed 001 T3 "both idle => I/O-bound": under half the allotted cores busy counts as idle
ANOMALY_ISNAN_PER_BACKWARD = 0.5  # anomaly mode checks every backward node's outputs for NaN (torch/csrc/autograd/engine.cpp)
SM_CLOCK_HIGH_FRAC = 0.80  # as diagnosis.SM_CLOCK_HIGH_FRAC (seed 001 T2): clock >= 80% of boost is "high"
POWER_CAP_FRAC = 0.95    # board at >= 95% of its power limit: the clock is held by the power cap (seed 001 T2 / U23)
GPU_BUSY_PCT = 80.0      # as diagnosis.telemetry_supports_compute: utilization >= 80% reads "busy"
DEBUG_ENV = {"CUDA_LAUNCH_BLOCKING": "1", "HIP_LAUNCH_BLOCKING": "1", "PYTORCH_NO_CUDA_MEMORY_CACHING": "1",
             "PYTORCH_NO_HIP_MEMORY_CACHING": "1"}
"""Variables that serialize every launch or disable the caching allocator (seed 001 T12; lesson 21
on HIP_LAUNCH_BLOCKING)."""

_MATH_SDPA = "aten::_scaled_dot_product_attention_math"
_FUSED_SDPA = re.compile(r"flash|efficient_attention|fmha|cudnn_attention|_scaled_dot_product_(flash|efficient|cudnn)", re.I)
_COMPILE_EV = re.compile(r"_dynamo/convert_frame\.py\(\d+\): _compile\b|compile_fx_inner|Torch-Compiled Region: \d+/[1-9]\d*")
"""Compilation inside the profiled steps: Dynamo's ``convert_frame._compile`` / Inductor's
``compile_fx_inner`` python events, or a compiled region whose compile id (``frame/N``) is past 0,
i.e. the N-th recompilation of that frame (torch/_dynamo/convert_frame.py names regions so)."""
_RECOMPILE_LOG = re.compile(r"Recompiling function|recompile_limit|cache_size_limit|torch\._dynamo hit config", re.I)


@dataclass(frozen=True)
class TriageFinding:
    """A triage claim (``claimkit.claim`` dict), the lever it adds, and why."""

    claim: dict[str, Any]
    lever: str
    why: str


def _ev(tool: str, query: str, returned: Any, **args: Any) -> Evidence:
    return Evidence(tool=tool, query=query, returned=returned, args=args)


# ---------------------------------------------------------------------------------------------
# T3 oversubscription
# ---------------------------------------------------------------------------------------------


def parse_job_script(text: str) -> dict[str, Any]:
    """``ntasks_per_node``, ``cpus_per_task``, ``num_workers``, ``omp_num_threads`` found in a
    SLURM job script or command line (``#SBATCH --ntasks-per-node=8``, ``--num-workers 8``,
    ``num_workers=8``, ``OMP_NUM_THREADS=7``); absent keys are missing."""
    out: dict[str, Any] = {}
    for key, rx in (("ntasks_per_node", r"--ntasks-per-node[= ](\d+)"), ("cpus_per_task", r"--cpus-per-task[= ](\d+)"),
                    ("num_workers", r"(?:--num[-_]workers[= ]|num_workers\s*[=:]\s*)(\d+)"),
                    ("omp_num_threads", r"OMP_NUM_THREADS=(\d+)")):
        m = re.findall(rx, text)
        if m:
            out[key] = int(m[-1])
    return out


def check_oversubscription(num_workers: int | None, ranks_per_node: int | None, cores: int | None,
                           cpu_util_pct: float | None = None, source: str = "manifest") -> TriageFinding | None:
    """T3: DataLoader worker processes per node (``num_workers x ranks_per_node``) above the cores
    the job may use (``cpus_per_task x ranks`` or the node's count). None when inputs are missing
    or the workers fit. ``cpu_util_pct`` (node CPU busy %) is added as evidence when known."""
    if not num_workers or not ranks_per_node or not cores:
        return None
    procs = num_workers * ranks_per_node
    if procs <= cores:
        return None
    ev = [_ev(source, "num_workers x ranks_per_node / cores", {"num_workers": num_workers, "ranks_per_node": ranks_per_node,
                                                                 "cores": cores}, num_workers=num_workers,
              ranks_per_node=ranks_per_node, cores=cores)]
    if cpu_util_pct is not None:
        ev.append(_ev("promql.instant", "cpu_util avg", cpu_util_pct))
    ratio = procs / cores
    c = claim("triage.t3.oversubscription", "telemetry_analyst",
              f"{num_workers} DataLoader workers x {ranks_per_node} ranks = {procs} worker processes on {cores} cores "
              f"({ratio:.2f} per core), plus the ranks themselves: the host CPUs are oversubscribed (seed 001 T3)"
              + (f"; node CPU busy {cpu_util_pct:.0f}%" if cpu_util_pct is not None else ""),
              "dataloader_procs_per_core", round(ratio, 3), "ratio", ev, 0.8)
    return TriageFinding(c, "num_workers", f"cap num_workers at {max(1, cores // ranks_per_node - 1)} per rank and "
                         "OMP_NUM_THREADS to the cgroup quota (lesson 22: 64 workers on 56 CPUs regressed 5.6%)")


def rederive_oversubscription(job_script: str, cores: int | None = None) -> float | None:
    """Verifier path: the ratio from the job script's text alone (``--ntasks-per-node``,
    ``--cpus-per-task``, ``num_workers``), not from the manifest."""
    p = parse_job_script(job_script)
    n, r = p.get("num_workers"), p.get("ntasks_per_node")
    cores = cores or ((p.get("cpus_per_task") or 0) * (r or 0)) or None
    if not n or not r or not cores:
        return None
    return round(n * r / cores, 3)


# ---------------------------------------------------------------------------------------------
# T8 I/O-bound vs CPU-transform-bound
# ---------------------------------------------------------------------------------------------


def check_data_split(dataloader_share: float | None, cpu_util_pct: float | None) -> TriageFinding | None:
    """T8, for a data-bound step (``dataloader_share``: DataLoader time / step time from the
    trace): host CPU busy >= :data:`CPU_BUSY_PCT` -> CPU-transform-bound; <= :data:`CPU_IDLE_PCT`
    -> I/O-bound; between, None (not separable from these two readings)."""
    if dataloader_share is None or cpu_util_pct is None:
        return None
    ev = [_ev("tracelens.analyze_trace", "dataloader_ms_per_step / step_time_ms", dataloader_share),
          _ev("promql.instant", "cpu_util avg", cpu_util_pct)]
    if cpu_util_pct >= CPU_BUSY_PCT:
        c = claim("triage.t8.transform_bound", "telemetry_analyst",
                  f"data loading takes {dataloader_share * 100:.0f}% of the step while the host CPU is {cpu_util_pct:.0f}% busy: "
                  "CPU-transform-bound (seed 001 T8)", "cpu_util", cpu_util_pct, "%", ev, 0.7)
        return TriageFinding(c, "gpu_transforms", "move the per-sample transform to the GPU (DALI, torchvision v2 on tensors); "
                             "more workers cap at the core count")
    if cpu_util_pct <= CPU_IDLE_PCT:
        c = claim("triage.t8.io_bound", "telemetry_analyst",
                  f"data loading takes {dataloader_share * 100:.0f}% of the step while the host CPU is only {cpu_util_pct:.0f}% "
                  "busy: I/O-bound (seed 001 T8)", "cpu_util", cpu_util_pct, "%", ev, 0.7)
        return TriageFinding(c, "stage_to_local_nvme", "stage the working set to node-local NVMe or shard small files "
                             "(seed 001 T8: U8/U25)")
    return None


# ---------------------------------------------------------------------------------------------
# trace scans (T14, T16, T12-anomaly)
# ---------------------------------------------------------------------------------------------


def trace_names(path: str | Path) -> dict[str, int]:
    """Event name -> count over a kineto trace's events (cpu ops, kernels, annotations)."""
    out: dict[str, int] = {}
    for e in read_trace_json(path).get("traceEvents") or []:
        n = e.get("name")
        if isinstance(n, str):
            out[n] = out.get(n, 0) + 1
    return out


def _raw_count(path: str | Path, pattern: str) -> int:
    """Verifier path: occurrences of ``"name": "<pattern...>"`` in the raw text, no JSON parse."""
    p = Path(path)
    raw = (gzip.open(p, "rt", errors="replace") if p.suffix == ".gz" else open(p, errors="replace")).read()
    return len(re.findall(r'"name":\s*"' + pattern, raw))


def check_sdpa_fallback(names: dict[str, int], path: str = "") -> TriageFinding | None:
    """T14: the SDPA math backend ran (``aten::_scaled_dot_product_attention_math`` events) —
    the fused kernels were not eligible (dtype, head dim, mask) and PyTorch fell back silently."""
    n = names.get(_MATH_SDPA, 0)
    if not n:
        return None
    fused = sum(v for k, v in names.items() if _FUSED_SDPA.search(k) and k != _MATH_SDPA)
    c = claim("triage.t14.sdpa_math", "trace_analyst",
              f"{n} attention calls ran SDPA's math backend ({_MATH_SDPA}), {fused} ran a fused kernel: a silent fallback "
              "(seed 001 T14; lesson 21: MATH is 10-15x slower than EFFICIENT)", "sdpa_math_calls", n, "calls",
              [_ev("trace.event_names", f"{Path(path).name}: count {_MATH_SDPA}", n, path=path)], 0.9)
    return TriageFinding(c, "sdpa_efficient", "feed SDPA bf16/fp16 inputs and force the fused backend with "
                         "sdpa_kernel([EFFICIENT_ATTENTION, FLASH_ATTENTION]) so an ineligible shape errors loudly")


def rederive_sdpa_fallback(path: str | Path) -> int:
    return _raw_count(path, re.escape(_MATH_SDPA) + '"')


def check_recompilations(names: dict[str, int], log_text: str = "", path: str = "") -> TriageFinding | None:
    """T16: torch.compile compiled inside the profiled (steady-state) steps, or the log reports
    recompilations / the recompile limit. Count = compile events in the trace + matching log lines."""
    n_trace = sum(v for k, v in names.items() if _COMPILE_EV.search(k))
    n_log = len(_RECOMPILE_LOG.findall(log_text or ""))
    if not n_trace and not n_log:
        return None
    ev = []
    if n_trace:
        ev.append(_ev("trace.event_names", f"{Path(path).name}: count /{_COMPILE_EV.pattern}/", n_trace, path=path))
    if n_log:
        ev.append(_ev("log.grep", f"/{_RECOMPILE_LOG.pattern}/", n_log))
    c = claim("triage.t16.recompiles", "trace_analyst",
              f"torch.compile recompiled during the run ({n_trace} compile events in the profiled steps, {n_log} recompile "
              "lines in the log): past recompile_limit (default 8) Dynamo runs the function eagerly (seed 001 T16)",
              "recompile_events", n_trace + n_log, "events", ev, 0.8)
    return TriageFinding(c, "torch_compile_dynamic", "mark the varying dimension dynamic (dynamic=True / mark_dynamic) or "
                         "pad shapes to a few buckets; TORCH_LOGS=recompiles names the failing guard")


def rederive_recompilations(path: str | Path, log_text: str = "") -> int:
    raw = r"(?:[^\"]*_dynamo/convert_frame\.py\(\d+\): _compile\"|[^\"]*compile_fx_inner|Torch-Compiled Region: \d+/[1-9])"
    return _raw_count(path, raw) + len(_RECOMPILE_LOG.findall(log_text or ""))


def check_debug_apis(names: dict[str, int], env: dict[str, str] | None = None, path: str = "") -> TriageFinding | None:
    """T12: anomaly detection left on (``aten::isnan`` on at least half as many events as there
    are backward nodes, ``autograd::engine::evaluate_function``) or a launch-serializing variable
    of :data:`DEBUG_ENV` in the job's environment."""
    bw = sum(v for k, v in names.items() if k.startswith("autograd::engine::evaluate_function"))
    isnan = names.get("aten::isnan", 0)
    anomaly = bw > 0 and isnan >= ANOMALY_ISNAN_PER_BACKWARD * bw
    bad_env = {k: v for k, v in (env or {}).items() if DEBUG_ENV.get(k) == str(v).strip()}
    if not anomaly and not bad_env:
        return None
    ev = []
    parts = []
    if anomaly:
        ev.append(_ev("trace.event_names", f"{Path(path).name}: aten::isnan / autograd::engine::evaluate_function",
                      {"isnan": isnan, "backward_nodes": bw}, path=path))
        parts.append(f"{isnan} aten::isnan checks for {bw} backward nodes: torch.autograd anomaly detection is on")
    if bad_env:
        ev.append(_ev("manifest.env", "debug variables", bad_env))
        parts.append(", ".join(f"{k}={v}" for k, v in bad_env.items()) + " serializes every launch")
    c = claim("triage.t12.debug_apis", "trace_analyst", "; ".join(parts) + " (seed 001 T12)", "debug_apis_on",
              True, "bool", ev, 0.85)
    return TriageFinding(c, "disable_debug_apis", "turn off set_detect_anomaly and unset *_LAUNCH_BLOCKING for the real run "
                         "(anomaly detection is ~10x slower)")


def rederive_anomaly(path: str | Path) -> tuple[int, int]:
    """(aten::isnan, backward nodes) counted in the raw trace text."""
    return _raw_count(path, r'aten::isnan"'), _raw_count(path, r"autograd::engine::evaluate_function")


# ---------------------------------------------------------------------------------------------
# T2 clocks and power against the datasheet
# ---------------------------------------------------------------------------------------------


def check_clocks_power(gpu_name: str | None, gpu_util_pct: float | None, sm_clock_mhz: float | None,
                       power_w: float | None, boost_mhz: float | None = None) -> TriageFinding | None:
    """T2: utilization is believed only with clock and power. Busy (>= 80%) with the board at >=
    95% of its datasheet TDP and the clock under 80% of boost -> power-capped (throttled); busy
    with clock and power both low -> a trickle of small kernels reads as busy (starved). ``boost_mhz``
    from telemetry (``clocks.max.sm``) when given; the datasheet TDP bounds the power."""
    spec = find_gpu(gpu_name or "")
    if spec is None or gpu_util_pct is None or sm_clock_mhz is None or power_w is None or not boost_mhz:
        return None
    if gpu_util_pct < GPU_BUSY_PCT:
        return None
    clock_frac, power_frac = sm_clock_mhz / boost_mhz, power_w / spec.tdp_w
    ev = [_ev("promql.instant", "gpu_util, sm_clock, power avg", {"gpu_util": gpu_util_pct, "sm_clock": sm_clock_mhz,
                                                                   "power": power_w}),
          _ev("datasheet", spec.name, {"tdp_w": spec.tdp_w, "boost_mhz": boost_mhz})]
    if power_frac >= POWER_CAP_FRAC and clock_frac < SM_CLOCK_HIGH_FRAC:
        c = claim("triage.t2.power_capped", "telemetry_analyst",
                  f"GPU {gpu_util_pct:.0f}% busy at {power_w:.0f} W ({power_frac * 100:.0f}% of the {spec.tdp_w:.0f} W limit) with "
                  f"the SM clock at {sm_clock_mhz:.0f} MHz ({clock_frac * 100:.0f}% of boost): power-capped (seed 001 T2)",
                  "sm_clock_frac_of_boost", round(clock_frac, 3), "ratio", ev, 0.8)
        return TriageFinding(c, "check_power_thermal", "the board holds its power limit: compare with the node's MSMF "
                             "(eval-cluster) before blaming the code; check cooling and power caps")
    if clock_frac < SM_CLOCK_HIGH_FRAC and power_frac < 0.5:
        c = claim("triage.t2.util_lies", "telemetry_analyst",
                  f"GPU reads {gpu_util_pct:.0f}% busy but the SM clock is {clock_frac * 100:.0f}% of boost and power "
                  f"{power_frac * 100:.0f}% of the limit: a trickle of small kernels, not a compute-bound GPU (seed 001 T2)",
                  "sm_clock_frac_of_boost", round(clock_frac, 3), "ratio", ev, 0.7)
        return TriageFinding(c, "torch_compile_reduce_overhead", "fewer, larger kernels (graphs, fusion)")
    return None


def triage_trace(path: str | Path, *, log_text: str = "", env: dict[str, str] | None = None) -> list[TriageFinding]:
    """T14, T16 and T12 on one rank's trace (plus log and environment); the trace is read once."""
    names = trace_names(path)
    found = [check_sdpa_fallback(names, str(path)), check_recompilations(names, log_text, str(path)),
             check_debug_apis(names, env, str(path))]
    return [f for f in found if f is not None]
