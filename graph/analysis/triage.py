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
    ratio = procs / cores
    ev = [_ev(source, "num_workers x ranks_per_node / cores", {"num_workers": num_workers, "ranks_per_node": ranks_per_node,
                                                                 "cores": cores, "ratio": round(ratio, 3)},
              num_workers=num_workers, ranks_per_node=ranks_per_node, cores=cores)]
    if cpu_util_pct is not None:
        ev.append(_ev("promql.instant", "cpu_util avg", cpu_util_pct))
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


def _checked_name(name: str) -> bool:
    """Whether the trace checks (T14, T16, T12) read counts of this event name."""
    return (name == _MATH_SDPA or name == "aten::isnan" or name.startswith("autograd::engine::evaluate_function")
            or bool(_FUSED_SDPA.search(name)) or bool(_COMPILE_EV.search(name)))


class EventNameCounter:
    """Counts, over trace events fed one at a time (:meth:`feed`), the event names the trace checks
    read (cpu ops, kernels, annotations, python functions; :func:`_checked_name`). Memory: one flag
    per distinct name. Fed during the analysis pass, or over a file by :func:`trace_names`."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self._checked: dict[str, bool] = {}

    def feed(self, ev: Any) -> None:
        n = ev.get("name") if type(ev) is dict else None
        if type(n) is not str:
            return
        hit = self._checked.get(n)
        if hit is None:
            hit = self._checked[n] = _checked_name(n)
        if hit:
            self.counts[n] = self.counts.get(n, 0) + 1


def trace_names(path: str | Path, data: dict | None = None) -> dict[str, int]:
    """Event name -> count over a kineto trace's events, for the names the checks read
    (:class:`EventNameCounter`); ``data``: the trace already parsed, else the file is streamed."""
    from ...tools.trace.stream import feed_events

    c = EventNameCounter()
    if data is not None:
        for e in data.get("traceEvents") or []:
            c.feed(e)
    else:
        feed_events(path, (c.feed,))
    return c.counts


#: Chunk and overlap of the raw-text scan: the overlap is longer than any one event name.
_RAW_CHUNK = 8 << 20
_RAW_OVERLAP = 1 << 16


def _raw_count(path: str | Path, pattern: str) -> int:
    """Verifier path: occurrences of ``"name": "<pattern...>"`` in the raw text, no JSON parse.
    The text is scanned in :data:`_RAW_CHUNK` chunks with a :data:`_RAW_OVERLAP` overlap (memory: one
    chunk)."""
    p = Path(path)
    rx = re.compile(rb'"name"\s*:\s*"' + pattern.encode())
    n = 0
    carry = b""
    with open(p, "rb") as raw:
        gz = raw.read(2) == b"\x1f\x8b"  # by content, as the readers do, not by the file name
    with (gzip.open(p, "rb") if gz else open(p, "rb")) as fh:
        while True:
            chunk = fh.read(_RAW_CHUNK)
            buf = carry + chunk
            if not chunk:
                n += len(rx.findall(buf))
                return n
            cut = max(0, len(buf) - _RAW_OVERLAP)
            last = 0
            for m in rx.finditer(buf):
                if m.start() >= cut:
                    break
                n += 1
                last = m.end()
            carry = buf[max(cut, last):]


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
        ev.append(_ev("log.grep", f"/{_RECOMPILE_LOG.pattern}/", n_log, path=path))
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


def triage_trace(path: str | Path, *, log_text: str = "", env: dict[str, str] | None = None,
                 log_path: str | None = None, data: dict | None = None,
                 names: dict[str, int] | None = None) -> list[TriageFinding]:
    """T14, T16 and T12 on one rank's trace (plus log and environment). ``names``: the
    :class:`EventNameCounter` counts of the analysis pass; else the trace (``data`` or the file) is
    read once. ``log_path`` is recorded in the T16 evidence so a verifier can grep the log itself."""
    names = names if names is not None else trace_names(path, data)
    found = [check_sdpa_fallback(names, str(path)), check_recompilations(names, log_text, str(path)),
             check_debug_apis(names, env, str(path))]
    for f in found:
        if f is not None and f.claim.id == "triage.t16.recompiles" and log_path:
            for e in f.claim.evidence:
                e.args["log"] = log_path
    return [f for f in found if f is not None]


# ---------------------------------------------------------------------------------------------
# wiring: one call per analyst and per verifier
# ---------------------------------------------------------------------------------------------

ROOFLINE_MEMORY_CATEGORIES = ("elementwise", "normalization", "reduction", "GEMM", "CONV", "SDPA")


def _read_text(run_dir: str | Path | None, rel: str | None) -> str:
    if not run_dir or not rel:
        return ""
    p = Path(run_dir) / rel
    try:
        return p.read_text(errors="replace") if p.is_file() else ""
    except OSError:
        return ""


def _as_dict(x: Any) -> dict[str, Any]:
    """A pydantic model (``Manifest``) or a mapping as a plain dict (extras included)."""
    if x is None:
        return {}
    return x.model_dump(mode="json", by_alias=False) if hasattr(x, "model_dump") else dict(x)


def _run_dir(state: dict[str, Any]) -> str | None:
    """The perf-run directory of a graph state (``run.perf_run``, else ``request.perf_run``)."""
    run, req = state.get("run"), state.get("request")
    for o in (run, req):
        v = getattr(o, "perf_run", None) if o is not None and not isinstance(o, dict) else (o or {}).get("perf_run")
        if v:
            return str(v)
    return None


def series_mean(series: Any) -> float | None:
    """Mean of a ``promql.job_series`` result (``{instance: [(t, value), ...]}``); None if empty."""
    pts = [float(v) for pairs in (series or {}).values() for _t, v in pairs if v is not None] if isinstance(series, dict) else []
    return sum(pts) / len(pts) if pts else None


def env_from_script(text: str) -> dict[str, str]:
    """``VAR=value`` assignments of a job script (``export VAR=value`` or a bare assignment)."""
    return {m.group(1): m.group(2).strip("'\"") for m in re.finditer(r"^\s*(?:export\s+)?([A-Z][A-Z0-9_]*)=(\S+)", text, re.M)}


def roofline_claims(path: str | Path, gpu: str | None, rank: Any = None, data: dict | None = None,
                    totals: dict[str, Any] | None = None, device: str | None = None,
                    ) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """One claim per memory-bound category of the trace's roofline (arithmetic intensity below
    the ridge point; value = achieved TB/s, statement with % of the datasheet peak) and the
    roofline dict; ([], None) when the trace has no shapes or the GPU is unknown. ``totals``: the
    analysis pass's :meth:`~ai4s_graph.tools.perfmodel.roofline.RooflineCollector.totals` (kernels
    linked by External id) and ``device`` the trace's device name; else the trace is read."""
    from ...tools.errors import InputError
    from ...tools.perfmodel.roofline import roofline, roofline_of

    try:
        rf = roofline_of(totals, gpu or device, Path(path).name) if totals is not None else roofline(path, gpu, data=data)
    except InputError:
        return [], None
    if not rf["shapes_recorded"]:
        return [], rf
    out = []
    for cat, a in rf["categories"].items():
        if a["bound"] != "memory" or not a["kernel_us"]:
            continue
        ev = [Evidence(tool="perfmodel.roofline", query=f"{Path(path).name}: {cat} bytes / kernel time",
                       returned={"bytes": a["bytes"], "kernel_us": a["kernel_us"], "intensity": a["intensity"],
                                 "ridge": a["ridge"], "tbps": round(a["tbps"], 4)}, args={"path": str(path), "rank": rank, "gpu": gpu, "category": cat})]
        out.append(claim(f"triage.roofline.{cat.lower()}", "trace_analyst",
                         f"{cat} is memory-bound by the roofline: {a['intensity']:.1f} FLOP/B below the {rf['gpu']} ridge of "
                         f"{a['ridge']:.0f} FLOP/B; it moves {a['tbps']:.3f} TB/s, {a['pct_peak_bw']:.0f}% of the "
                         f"{rf['hbm_tbps']:.2f} TB/s peak, over {a['kernel_us'] / 1000:.2f} ms of kernels",
                         f"roofline.{cat}.tbps", round(a["tbps"], 4), "TB/s", ev, 0.8))
    return out, rf


def _trace_device(path: str | Path) -> str:
    """The trace's ``deviceProperties[0].name`` (before or after the events), "" when absent."""
    from ...tools.errors import InputError
    from ...tools.trace.stream import read_header

    try:
        props = read_header(path, ("deviceProperties",), trailer=True).get("deviceProperties") or []
    except InputError:
        return ""
    return str(props[0].get("name", "")) if props and isinstance(props[0], dict) else ""


def attach_trace_triage(trace_findings: dict[str, Any], good: list[dict[str, Any]], manifest: dict[str, Any] | None,
                        run_dir: str | None) -> list[dict[str, Any]]:
    """The trace analyst's one call: T14/T16/T12 and the roofline on the first good rank's trace.
    Adds ``triage`` (``[{claim, lever, why}]``) and ``roofline`` to ``trace_findings``; returns
    the claims. Never raises on missing inputs."""
    if not good:
        return []
    m = _as_dict(manifest)
    arts = m.get("artifacts") or {}
    res = good[0]
    log = _read_text(run_dir, arts.get("train_log"))
    script = _read_text(run_dir, arts.get("job_script"))
    env = {**env_from_script(script), **(m.get("env") or {})}
    log_path = str(Path(run_dir) / arts["train_log"]) if log and run_dir and arts.get("train_log") else None
    from ...tools.errors import InputError

    names, totals = res.get("triage_names"), res.get("roofline_totals")  # None totals: no roofline readable
    if "triage_names" not in res:  # no analysis-pass counts (a SLURM-array rank): one read here
        from ...tools.perfmodel.roofline import RooflineCollector
        from ...tools.trace.stream import feed_events

        counter, col = EventNameCounter(), RooflineCollector()
        try:
            feed_events(res["path"], (counter.feed, col.feed))
        except InputError:
            return []
        names = counter.counts
        try:
            totals = col.totals("external_id")
        except (InputError, TypeError, ValueError):
            totals = None  # no roofline; the name checks stand
    found = triage_trace(res["path"], log_text=log, env=env, log_path=log_path, names=names or {})
    for f in found:
        for e in f.claim.evidence:
            e.args.update(rank=res.get("rank"), path=res["path"])
    rc, rf = ([], None) if totals is None else \
        roofline_claims(res["path"], m.get("gpu"), res.get("rank"), totals=totals,
                        device=res.get("device_name") or _trace_device(res["path"]))
    trace_findings["triage"] = [{"id": f.claim.id, "lever": f.lever, "why": f.why} for f in found]
    trace_findings["triage"] += [{"id": c.id, "lever": "fuse_elementwise", "why": "bring the memory-bound category "
                                  "to peak bandwidth: fuse it (torch.compile) or move fewer bytes (bf16)"} for c in rc]
    trace_findings["roofline"] = rf
    return [f.claim for f in found] + rc


def attach_telemetry_triage(findings: dict[str, Any], manifest: Any, run_dir: str | Path | None) -> list[dict[str, Any]]:
    """The telemetry analyst's one call: T3 (workers x ranks vs cores, manifest + job script),
    T2 (clocks and power vs the datasheet) and T8 (with the rank-0 trace's DataLoader share).
    Adds ``triage`` to ``findings['telemetry']`` (created when absent); returns the claims."""
    m = _as_dict(manifest)
    arts = m.get("artifacts") or {}
    tel = findings.get("telemetry") or {}
    st = tel.get("stats") or {}
    series = tel.get("series") or {}

    cpu = (st.get("cpu_util.avg") or {}).get("value")
    cpu = cpu if cpu is not None else series_mean(series.get("cpu_util"))
    script = _read_text(run_dir, arts.get("job_script"))
    js = parse_job_script(script)
    ranks = js.get("ntasks_per_node") or m.get("gpus_per_node")
    cores = m.get("cpus_per_node") or ((js.get("cpus_per_task") or 0) * (ranks or 0)) or None
    found = [check_oversubscription(m.get("num_workers") if m.get("num_workers") is not None else js.get("num_workers"),
                                    ranks, cores, cpu)]
    spec = find_gpu(m.get("gpu") or "")
    found.append(check_clocks_power(m.get("gpu"), (st.get("gpu_util.avg") or {}).get("value"),
                                    (st.get("sm_clock.avg") or {}).get("value"), (st.get("power.avg") or {}).get("value"),
                                    boost_mhz=spec.boost_mhz if spec else None))
    traces = arts.get("traces") or []
    if cpu is not None and (cpu >= CPU_BUSY_PCT or cpu <= CPU_IDLE_PCT) and traces and run_dir:
        from ...tools.errors import Ai4sError
        from ...tools.trace import kineto

        try:
            ss = kineto.step_stats(kineto.load_events(Path(run_dir) / traces[0]))
            share = ss["dataloader_ms_per_step"] / ss["step_time_ms"] if ss.get("step_time_ms") else None
            if share is not None and share >= 0.30:  # diagnosis.DATALOADER_STEP_SHARE: the step is data-bound
                found.append(check_data_split(share, cpu))
        except (Ai4sError, OSError, KeyError):
            pass
    found = [f for f in found if f is not None]
    findings.setdefault("telemetry", tel)["triage"] = [{"id": f.claim.id, "lever": f.lever, "why": f.why} for f in found]
    from ...tools.report.not_checked import triage_not_checked  # issue 28: a check that could not run says so

    tel["not_checked"] = triage_not_checked(m.get("num_workers") if m.get("num_workers") is not None else js.get("num_workers"),
                                            ranks, cores, cpu, traces)
    return [f.claim for f in found]


def verify_claim(c: dict[str, Any], state: dict[str, Any] | None = None) -> tuple[Any, Any, str]:
    """A verifier's one call for a ``triage.*`` claim (a ``Claim``): ``(value, Tolerance, method)`` re-derived
    through a path independent of the analyst's (raw-text counts of the trace, the correlation-id
    kernel link of the roofline, the job script's text, the telemetry series rather than the PromQL
    statistic). ``(None, Tolerance(), why)`` when no independent path applies."""
    from ...state import Tolerance

    c = c.model_dump(mode="json") if hasattr(c, "model_dump") else c
    cid = c["id"]
    args = ((c.get("evidence") or [{}])[0].get("args")) or {}
    path = args.get("path")
    st = state or {}
    if cid == "triage.t14.sdpa_math" and path:
        return rederive_sdpa_fallback(path), Tolerance(), "raw-text count of the math-backend op in the trace file"
    if cid == "triage.t16.recompiles" and path:
        log = args.get("log")
        text = Path(log).read_text(errors="replace") if log and Path(log).is_file() else ""
        return rederive_recompilations(path, text), Tolerance(), "raw-text count of compile events plus log grep"
    if cid == "triage.t12.debug_apis" and path:
        isnan, bw = rederive_anomaly(path)
        env_ev = next((e["returned"] for e in c["evidence"] if e.get("tool") == "manifest.env"), None)
        return (bool(env_ev) or (bw > 0 and isnan >= ANOMALY_ISNAN_PER_BACKWARD * bw)), Tolerance(), \
            "raw-text counts of aten::isnan and backward nodes"
    if cid.startswith("triage.roofline.") and path:
        from ...tools.perfmodel.roofline import roofline, roofline_of

        res = next((r for r in st.get("rank_results") or [] if str(r.get("path")) == str(path)), {})
        corr = (res.get("rederived") or {}).get("roofline_correlation")
        rf = roofline_of(corr, args.get("gpu") or res.get("device_name") or _trace_device(path), Path(path).name) \
            if corr is not None else roofline(path, args.get("gpu"), link="correlation")
        a = rf["categories"].get(args.get("category"), {})
        return (round(a["tbps"], 4) if a else None), Tolerance(rel=0.01), "roofline with kernels linked by correlation id"
    if cid == "triage.t3.oversubscription":
        m = _as_dict(st.get("manifest"))
        script = _read_text(_run_dir(st), (m.get("artifacts") or {}).get("job_script"))
        v = rederive_oversubscription(script, m.get("cpus_per_node")) if script else None
        return v, Tolerance(rel=0.001), "the job script's --ntasks-per-node, --cpus-per-task and num_workers"
    if cid.startswith(("triage.t8.", "triage.t2.")):
        tel = ((st.get("findings") or {}).get("telemetry") or {}).get("series") or {}
        metric = "cpu_util" if cid.startswith("triage.t8.") else None
        if cid.startswith("triage.t2."):
            sm = series_mean(tel.get("sm_clock"))
            boost = next((e["returned"].get("boost_mhz") for e in c["evidence"] if e.get("tool") == "datasheet"), None)
            if sm is not None and boost:
                return round(sm / boost, 3), Tolerance(abs=0.05), "mean of the sm_clock series over the datasheet boost clock"
        v = series_mean(tel.get(metric)) if metric else None
        if v is not None:
            return round(v, 6), Tolerance(abs=5.0), "mean of the cpu_util series (query_range points, not the PromQL avg)"
    return None, Tolerance(), "no independent path for this triage claim"


def recommend(levers: list[Any], findings: dict[str, Any], verdicts: list[Any]) -> list[Any]:
    """The synthesizer's one call: ``levers`` (``LeverRecommendation``) plus the lever of every
    triage claim a verifier confirmed (not already listed), each with its estimated saving per
    step, ordered by that saving (:func:`ai4s_graph.tools.levers.impact.annotate`)."""
    from ...state.report import LeverRecommendation
    from ...tools.levers import impact

    confirmed = {v.claim.id for v in verdicts if getattr(v.verdict, "value", v.verdict) == "confirmed"}
    tf = findings.get("trace") or {}
    have = {lv.name for lv in levers}
    extra = []
    for t in list(tf.get("triage") or []) + list((findings.get("telemetry") or {}).get("triage") or []):
        if t["id"] in confirmed and t["lever"] not in have:
            have.add(t["lever"])
            extra.append(LeverRecommendation(name=t["lever"], why=t["why"], claims=[t["id"]]))
    rank0 = (tf.get("ranks") or [None])[0]
    return impact.annotate(list(levers) + extra, rank0, tf.get("roofline"))


def memory_bound_from_roofline(roofline: dict[str, Any] | None) -> tuple[bool | None, str]:
    """For ``diagnosis.classify_trace``: whether the kernel time is dominated by memory-bound
    categories by the roofline (arithmetic intensity below the ridge), measured from recorded
    shapes. (None, why) when the trace has no shapes. True when the memory-bound categories hold
    more kernel time than the compute-bound ones."""
    if not roofline or not roofline.get("shapes_recorded") or not roofline.get("categories"):
        return None, "no roofline: the trace was recorded without shapes (record_shapes=True)"
    mem = sum(a["kernel_us"] for a in roofline["categories"].values() if a["bound"] == "memory")
    comp = sum(a["kernel_us"] for a in roofline["categories"].values() if a["bound"] == "compute")
    return mem > comp, f"memory-bound categories {mem / 1000:.2f} ms vs compute-bound {comp / 1000:.2f} ms of kernel time"
