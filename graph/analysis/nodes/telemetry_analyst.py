"""The telemetry and figure-of-merit analyst: GPU telemetry from VictoriaMetrics through PromQL
joined to the job via Omnistat's ``rmsjob_info`` (seed 000 lesson 5), the training log's figure
of merit, and the precision discriminator when ``--compare`` names a second run (lesson 13).
Claims are MADE here; ``telemetry_verifier`` checks them.
"""

from __future__ import annotations

import contextlib
import math
import statistics
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator

from ..configuration import RunRequest, llm_manifest, llm_request, run_dir as resolved_run_dir
from ..inputs import job_script, log_path
from ..schema import AnalysisState
from ...agents import llm
from ...rules import registry
from ...rules.diagnosis import board_limits, telemetry_supports_compute
from ...rules.figures import Inputs
from ...runtime import node
from ....state import Claim, Evidence, Manifest, Outcome, StatusLine, with_note, worst
from ....state.claimkit import claim
from ....tools.errors import Ai4sError, InputError
from ....tools.slurm.scriptparse import parse_job_script
from ....tools.telemetry import export, gpu_series, metrics, promql, rawstats
from ....tools.telemetry.victoria import VictoriaMetrics
from ....tools.trainlog import fom, logtext
from ....tools.trainlog.fom_fields import extra_foms

ANALYST = "telemetry_analyst"
# Telemetry statistics the analyst claims: (logical metric, statistic).
TELEMETRY_STATS = [("gpu_util", "avg"), ("sm_clock", "avg"), ("sm_clock", "max"), ("power", "avg"),
                   ("power", "max"), ("hbm_used", "max")]
#: Claimed when the exporter writes them (DCGM profiling counters, Omnistat's occupancy collector);
#: their absence is not reported as missing.
OPTIONAL_STATS = [("sm_active", "avg"), ("dram_active", "avg")]
CPU_STATS = [("cpu_util", "avg")]
PLOT_METRICS = ["gpu_util", "sm_clock", "power", "hbm_used", "cpu_util"]


def analyze_fom(run_dir: Path, manifest: Manifest, out_dir: Path | None, text: str | None = None,
                facts: dict[str, Any] | None = None) -> tuple[dict[str, Any], list[Claim]]:
    """Parse ``train.log`` into figures of merit (writes ``foms.json`` into ``out_dir``) and claims;
    ``text``: the log's text when the node already read it (the one read of the log); ``facts``:
    receives the parsed steady step times (``step_times_s``, s), ``batches_per_epoch`` and
    ``warmup_steps_skipped`` (where the steady steps' epochs begin) as soon as the log parses.

    Raises :class:`InputError` (one line) for a missing, empty or unrecognisable log."""
    log = run_dir / (manifest.artifacts.train_log or "train.log")
    res = fom.parse_log(log, global_batch_size=manifest.global_batch_size,
                        fom_kind=fom.fom_kind_for_model(manifest.model), text=text)
    if facts is not None:
        facts["step_times_s"] = list(res.step_times_s)
        facts["batches_per_epoch"], facts["warmup_steps_skipped"] = res.batches_per_epoch, res.warmup_steps_skipped
    if out_dir is not None:  # lessons 4, 24: HBM total, MFMA FLOP/s (two methods), from the run's telemetry
        tel = extra_foms(run_dir, manifest)
        fom.write_foms(res, out_dir / "foms.json", hbm_reserved_bytes=manifest.hbm_reserved_bytes,
                       hbm_total_bytes=tel.pop("hbm_total_bytes"), extra=tel)
    d = res.model_dump()
    q = f"parse_log({log.name}, global_batch_size={manifest.global_batch_size})"
    bad = [k for k in ("steady_step_time_s", "epoch_time_s") if d.get(k) is not None
           and not (math.isfinite(d[k]) and d[k] > 0)]
    if bad:
        raise InputError(f"{log.name}: {bad[0]} = {d[bad[0]]} is not a positive wall time: the log's step times "
                         "are malformed")

    def ev(field: str) -> Evidence:
        return Evidence(tool="fom.parse_log", query=f"{q}.{field}", returned=d[field], args={"path": str(log)})

    claims = []
    if res.steady_step_time_s is not None:
        claims.append(claim("om.fom.steady_step_time_s", ANALYST,
                            f"The steady-state step takes {res.steady_step_time_s * 1e3:.2f} ms (median of "
                            f"{res.n_timed_steps - res.warmup_steps_skipped} steps after {res.warmup_steps_skipped} "
                            "warm-up steps, rank 0).", "fom.steady_step_time_s", res.steady_step_time_s, "s",
                            [ev("steady_step_time_s")]))
    if res.epoch_time_s is not None:
        claims.append(claim("om.fom.epoch_time_s", ANALYST,
                            f"An epoch takes {res.epoch_time_s:.3f} s ({res.batches_per_epoch} batches per epoch).",
                            "fom.epoch_time_s", res.epoch_time_s, "s", [ev("epoch_time_s")]))
    if res.throughput_samples_per_s is not None:
        claims.append(claim("om.fom.throughput", ANALYST,
                            f"Throughput is {res.throughput_samples_per_s:.1f} samples/s at global batch "
                            f"{res.global_batch_size}.", "fom.throughput_samples_per_s", res.throughput_samples_per_s,
                            "samples/s", [ev("throughput_samples_per_s")]))
    if res.loss_decreased is not None:
        claims.append(claim("om.fom.loss_decreased", ANALYST,
                            f"The epoch loss {'fell' if res.loss_decreased else 'did not fall'} from the first to the "
                            f"last epoch ({res.epoch_losses[0]:.4g} → {res.epoch_losses[-1]:.4g}); strictly decreasing "
                            f"every epoch: {res.loss_sanity_pass}.", "fom.loss_decreased", res.loss_decreased, "bool",
                            [ev("loss_decreased")], confidence=0.9))
    if res.loss_diverged:
        claims.append(claim("om.fom.loss_diverged", ANALYST,
                            f"Training diverged: {res.n_nonfinite_losses} of {res.n_losses} logged loss values are "
                            f"NaN/inf (the first at {res.first_nonfinite_loss}); its step times do not describe a "
                            "working run.", "fom.loss_diverged", True, "bool", [ev("loss_diverged")], confidence=0.95))
    return d, claims


def analyze_compare(run_dir: Path, manifest: Manifest, compare_dir: Path) -> tuple[dict[str, Any], list[Claim]]:
    """The precision discriminator between this run and ``compare_dir`` (same model, another
    precision), seed 000 lessons 13 and 22. Raises :class:`InputError` when the runs cannot be
    compared (same precision, different model, missing log)."""
    other = Manifest.read(compare_dir / "manifest.json")
    if other.model != manifest.model:
        raise InputError(f"--compare run {other.jobid} is model {other.model}, not {manifest.model}")
    order = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8")
    a, b = (manifest, run_dir), (other, compare_dir)
    if manifest.precision not in order or other.precision not in order or manifest.precision == other.precision:
        raise InputError(f"--compare needs two precisions, got {manifest.precision} and {other.precision}")
    hi, lo = (a, b) if order.index(manifest.precision) < order.index(other.precision) else (b, a)
    f_hi = fom.parse_log(hi[1] / "train.log", global_batch_size=hi[0].global_batch_size)
    f_lo = fom.parse_log(lo[1] / "train.log", global_batch_size=lo[0].global_batch_size)
    v = fom.compare_precision(f_hi, f_lo, hi=hi[0].precision, lo=lo[0].precision)
    d = v.model_dump(mode="json")
    d.update({"hi_jobid": hi[0].jobid, "lo_jobid": lo[0].jobid,
              "hi_warmup": f_hi.warmup_steps_skipped, "lo_warmup": f_lo.warmup_steps_skipped})
    q = (f"compare_precision(steady_step_time_s of job {hi[0].jobid} ({hi[0].precision}), "
         f"job {lo[0].jobid} ({lo[0].precision}))")
    ev = Evidence(tool="fom.compare_precision", query=q, returned=d,
                  args={"hi_log": str(hi[1] / "train.log"), "lo_log": str(lo[1] / "train.log")})
    claims = [
        claim("om.compare.speedup", ANALYST,
              f"Going from {hi[0].precision} (job {hi[0].jobid}) to {lo[0].precision} (job {lo[0].jobid}) speeds the "
              f"steady step up {v.speedup:.3f}× ({v.hi_value * 1e3:.2f} → {v.lo_value * 1e3:.2f} ms).",
              "compare.precision_speedup", round(v.speedup, 6), "×", [ev]),
        claim("om.compare.bottleneck", ANALYST,
              f"The precision discriminator says {v.bottleneck_class.value}: {v.rule} ({v.lesson}).",
              "diagnosis.precision_discriminator_class", v.bottleneck_class.value, "class", [ev], confidence=0.85),
    ]
    return d, claims


@contextlib.contextmanager
def tsdb_for(req: RunRequest, run_dir: Path, manifest: Manifest,
             problems: list[str] | None = None) -> Iterator[tuple[str, str]]:
    """Yield ``(url, source)`` of a TSDB holding the job's telemetry: ``--tsdb-url`` as given, else a
    VictoriaMetrics started on loopback and loaded with the run's ``telemetry/*.jsonl`` (stopped
    afterwards). What the import left out (bad lines, stale markers, implausible samples, series
    that did not arrive) is appended to ``problems``. Raises :class:`InputError` when neither exists."""
    problems = problems if problems is not None else []
    if req.tsdb_url:
        yield req.tsdb_url, "--tsdb-url"
        return
    files = [run_dir / p for p in manifest.artifacts.telemetry]
    if not files:
        raise InputError(f"no telemetry: no --tsdb-url and no telemetry/*.jsonl in {run_dir}")
    with VictoriaMetrics() as vm:
        for f in files:  # null values, bad lines, implausible samples: counted; every series counted in the store
            problems += [f"telemetry: {p}" for p in vm.import_export(f, manifest.gpu).problems()]
        yield vm.url, f"VictoriaMetrics on loopback loaded with {', '.join(f.name for f in files)}"


#: A job shorter than this many samples per series cannot show a trend; its statistics say so.
MIN_SAMPLES = 2


def _iso(t: float) -> str:
    """Unix seconds as ``2026-11-30T12:00:00.000Z`` (UTC), or the number when out of range."""
    try:
        return datetime.fromtimestamp(float(t), tz=timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    except (OverflowError, OSError, ValueError):
        return repr(t)


def job_window(pq: Any, manifest: Manifest) -> tuple[tuple[float, float], str, list[str]]:
    """The window the statistics cover: the job's SLURM start and end from the manifest (written
    from sacct); only when the manifest has none, the first..last ``rmsjob_info`` sample (which a
    stale series stretches). Returns ``(window, source, problems)``. Raises :class:`InputError`
    when neither bounds the job (no SLURM times and fewer than two ``rmsjob_info`` samples), and
    when the manifest's SLURM end is not after its start (an input error, named with both times:
    never silently replaced by another window)."""
    if manifest.start is not None and manifest.end is not None and not (math.isfinite(manifest.start)
                                                                         and math.isfinite(manifest.end)):
        raise InputError(f"job window start_unix={manifest.start}, end_unix={manifest.end} in manifest.json is not "
                         "a finite time: no telemetry window")
    if manifest.start is not None and manifest.end is not None and not manifest.end > manifest.start:
        rel = "is before" if manifest.end < manifest.start else "equals"
        raise InputError(f"job window end {_iso(manifest.end)} {rel} its start {_iso(manifest.start)} "
                         f"(manifest.json end_unix={manifest.end}, start_unix={manifest.start}): no telemetry window")
    if manifest.start is not None and manifest.end is not None and manifest.end > manifest.start:
        return (float(manifest.start), float(manifest.end)), "SLURM start/end (manifest.json)", []
    w = pq.job_window(manifest.jobid)
    if not w[1] > w[0]:
        raise InputError(f"job {manifest.jobid} has no SLURM start/end and one rmsjob_info sample time only: "
                         "the job window is unknown")
    return w, "rmsjob_info samples (no SLURM start/end in the manifest)", [
        "telemetry: no SLURM start/end in the manifest: the window is rmsjob_info's span, which a stale series "
        "stretches"]


def window_check(pq: Any, jobid: str, window: tuple[float, float]) -> dict[str, Any] | None:
    """``rmsjob_info``'s span beside the SLURM window: ``{"rmsjob_info": [first, last], "before_s",
    "after_s", "interval_s"}`` (how far it starts before / ends after the job, and its median
    scrape interval), or None when it has no samples within an hour of the job. A series that
    outlives the job by more than two scrape intervals is Omnistat's stale-series fault."""
    series = pq.export(f'rmsjob_info{{jobid="{jobid}"}}', window[0] - 3600, window[1] + 3600)
    ts = sorted({t for s in series for t, v in zip(s.timestamps, s.values) if v > 0})
    if not ts:
        return None
    gaps = [b - a for a, b in zip(ts, ts[1:])]
    return {"rmsjob_info": [ts[0], ts[-1]], "before_s": round(window[0] - ts[0], 3),
            "after_s": round(ts[-1] - window[1], 3), "interval_s": round(statistics.median(gaps), 3) if gaps else None}


def _names_host(node: str, hosts: Any) -> bool:
    """Whether SLURM node name ``node`` is one of ``hosts`` (telemetry host names), exactly or by
    short name (``node1`` and ``node1.cluster.local`` are one host: exporters may report FQDNs)."""
    short = node.split(".")[0]
    return node in hosts or any(h.split(".")[0] == short for h in hosts)


def nan_counts(files: list[Path], manifest: Manifest, metrics: list[str],
               window: tuple[float, float]) -> dict[str, tuple[int, int]]:
    """``{metric: (finite samples, NaN/inf samples)}`` of the job's series in ``window`` read from
    the raw export ``files``, for the metrics that have NaN samples there. VictoriaMetrics drops
    NaN samples at import, so PromQL alone cannot tell "all NaN" from "no series". ``{}`` when
    the export cannot be read or joined (the PromQL path reports that)."""
    try:
        series = [x for f in files for x in export.load_export(f, manifest.gpu)]
    except Ai4sError:
        return {}
    out = {}
    for metric in dict.fromkeys(metrics):
        try:
            d = rawstats.raw_job_stat_detail(series, metric, manifest.jobid, "max", window=window)
        except Ai4sError:
            continue
        if d.nan_count:
            out[metric] = (d.sample_count, d.nan_count)
    return out


def _job_gpus(pq: Any, jobid: str, window: tuple[float, float], missing: list[str]) -> Any:
    """The job's GPUs per host (``promql.PromQL.job_gpus``), its caveats appended to ``missing``;
    None (and the reason in ``missing``) when its card labels cannot be read."""
    try:
        gpus = pq.job_gpus(jobid, window)
    except InputError as e:
        missing.append(f"telemetry: {e}")
        return None
    missing += [f"telemetry: {p}" for p in gpus.problems()]
    return gpus


def _coverage_notes(manifest: Manifest, cov: Any, vendor: str, nans: dict[str, tuple[int, int]]) -> list[str]:
    """What the join of the job's SLURM nodes to its telemetry hosts leaves out, one line each:
    nodes without ``rmsjob_info``, a job with none, hosts without GPU series, NaN samples."""
    out = []
    slurm_nodes = list(manifest.nodes_list)
    absent = [n for n in slurm_nodes if not _names_host(n, cov.job_hosts)]
    if cov.job_hosts and absent and len(absent) == len(slurm_nodes):
        # no SLURM node matches: the statistics are of whatever hosts rmsjob_info names
        out.append(f"telemetry: none of the job's SLURM node(s) {', '.join(slurm_nodes)} has GPU series joined to "
                   f"the job: rmsjob_info{{jobid=\"{manifest.jobid}\"}} names host(s) "
                   f"{', '.join(sorted(cov.job_hosts))} instead, so the statistics are of those hosts")
    elif cov.job_hosts and absent:
        # the exporters name hosts as SLURM does (some match), but not all of the job's nodes report
        out.append(f"telemetry: no rmsjob_info for SLURM node(s) {', '.join(absent)}"
                   ": their telemetry is not in the statistics")
    gpu_job = bool(manifest.gpus_per_node) or bool(manifest.gpu)
    if not cov.job_hosts:
        out.append(f"telemetry: no rmsjob_info{{jobid=\"{manifest.jobid}\"}} within "
                   f"{promql.JOIN_MARGIN_S:.0f} s of the job window: its telemetry cannot be joined to it")
    elif vendor == "none" and (gpu_job or cov.gpu_hosts) and not nans:
        out.append(f"telemetry: no GPU series matches the job's host(s) {', '.join(sorted(cov.job_hosts))}"
                   + (f" (GPU series in the window come from {', '.join(cov.gpu_hosts)})" if cov.gpu_hosts else ""))
    elif vendor != "none" and cov.unmatched:
        out.append(f"telemetry: no GPU series for job host(s) {', '.join(cov.unmatched)}: statistics cover "
                   f"{', '.join(h for h in sorted(cov.job_hosts) if h not in cov.unmatched)} only")
    for metric, (fin, nan) in nans.items():
        out.append(f"telemetry: {metric}: {fin + nan} sample(s) in the job window, all NaN: no statistic"
                   if not fin else f"telemetry: {metric}: {nan} of {fin + nan} sample(s) in the job window are "
                   f"NaN: statistics over the {fin} finite one(s)")
    return out


def _stat_claims(pq: Any, url: str, manifest: Manifest, findings: dict[str, Any],
                 nans: dict[str, tuple[int, int]]) -> list[Claim]:
    """One claim per telemetry statistic the vendor has (:data:`TELEMETRY_STATS` and
    :data:`OPTIONAL_STATS`, else :data:`CPU_STATS`), its PromQL query as evidence, naming the cards
    it joined (:func:`_job_gpus`); the statistics go to ``findings["stats"]``, a query that fails
    to ``findings["errors"]``, a metric the vendor's series lack to ``findings["missing"]``."""
    window = tuple(findings["window"])
    vendor = findings["vendor"]
    missing = findings["missing"]
    stats = TELEMETRY_STATS + OPTIONAL_STATS if vendor in ("nvidia", "amd") else CPU_STATS
    span = window[1] - window[0]
    wname = "SLURM" if findings["window_source"].startswith("SLURM") else "rmsjob_info"
    claims = []
    gpus = _job_gpus(pq, manifest.jobid, window, missing) if vendor in ("nvidia", "amd") else None
    joined = gpus.describe() if gpus is not None else ""
    if joined:
        findings["gpus"] = joined
    absent: list[str] = []
    for metric, stat in stats:
        try:
            r = pq.job_stat(metric, manifest.jobid, window, stat=stat)
        except InputError as e:
            findings.setdefault("errors", []).append(f"{metric}.{stat}: {e}")
            continue
        if r.value is None:
            if metric not in nans and metric not in absent and (metric, stat) not in OPTIONAL_STATS:
                absent.append(metric)
                names = " or ".join(src.inputs[0] for src in metrics.METRICS[metric].candidates(vendor)) or metric
                missing.append(f"telemetry: {metric}: no {names} samples on the job's GPUs in the window "
                               f"(other {vendor} series are there): no {metric} statistic")
            continue
        findings["stats"][f"{metric}.{stat}"] = {"value": r.value, "unit": r.unit, "query": r.query, "time": r.time,
                                                 "per_instance": r.per_instance, "sample_count": r.sample_count,
                                                 "nan_count": nans.get(metric, (0, 0))[1]}
        ev = Evidence(**r.evidence())
        ev.args.update({"url": url, "jobid": manifest.jobid})
        shown = (f"{r.value / 2**30:.2f} GiB" if r.unit == "bytes" else f"{r.value:.4g} {r.unit}")
        n_series = max(1, len(r.per_instance))
        nan_note = (f"; {nans[metric][1]} NaN sample(s) left out" if metric in nans else "")
        few = (f"; only {r.sample_count} sample(s) in the window, too few for a trend"
               if r.sample_count < MIN_SAMPLES * n_series else f" from {r.sample_count} samples")
        src_note = f" (from {r.source_label})" if r.source_label else ""
        gpu_note = f"; {joined}" if joined else ""
        claims.append(claim(f"om.tel.{metric}.{stat}", ANALYST,
                            f"Over the job's {span:.1f} s {wname} window, the {'time-weighted average' if stat == 'avg' else stat} "
                            f"{metric.replace('_', ' ')}{src_note} is "
                            f"{shown}{few}{nan_note}{gpu_note}.", f"telemetry.{metric}.{stat}", round(float(r.value), 6),
                            r.unit, [ev]))
    return claims


def _supports_compute_claim(findings: dict[str, Any], manifest: Manifest) -> Claim | None:
    """Seed 001 T2's reading of the statistics (:func:`~...rules.diagnosis.telemetry_supports_compute`)
    as a claim, or None when its inputs are missing; sets ``findings["supports_compute"]``."""
    st = findings["stats"]
    util, clk, clk_max = (st.get(k, {}).get("value") for k in ("gpu_util.avg", "sm_clock.avg", "sm_clock.max"))
    pw, pw_max = (st.get(k, {}).get("value") for k in ("power.avg", "power.max"))
    sup = telemetry_supports_compute(util, clk, clk_max, pw, pw_max, gpu_name=manifest.gpu)
    if sup is None:
        return None
    findings["supports_compute"] = sup
    lim = board_limits(manifest.gpu)
    ref = (f"the {manifest.gpu}'s {lim[1]:.0f} MHz boost clock and {lim[0]:.0f} W limit (datasheet)" if lim and lim[1]
           else f"the job's own maxima ({clk_max:.0f} MHz, {pw_max or 0:.0f} W): the board limits are unknown")
    ev = Evidence(tool="diagnosis.telemetry_supports_compute", query="gpu_util.avg, sm_clock.avg/max, power.avg/max",
                  returned=sup, args={"gpu_util": util, "sm_clock": clk, "sm_clock_max": clk_max,
                                      "power": pw, "power_max": pw_max, "gpu": manifest.gpu})
    return claim("om.tel.supports_compute", ANALYST,
                 f"Telemetry {'supports' if sup else 'does not support'} a compute-bound reading: utilization "
                 f"{util:.1f}%, SM clock {clk:.0f} MHz" + (f", power {pw:.0f} W" if pw is not None else "")
                 + f", against {ref} (utilization alone lies: seed 001 T2).", "telemetry.supports_compute",
                 sup, "bool", [ev], confidence=0.7)


def analyze_telemetry(url: str, source: str, manifest: Manifest,
                      raw_files: list[Path] | None = None) -> tuple[dict[str, Any], list[Claim]]:
    """Telemetry statistics over the job's SLURM window, each with its PromQL query as evidence;
    ``findings["missing"]`` lists what could not be joined (job hosts with no GPU series, a job
    with no ``rmsjob_info``, a metric whose samples are all NaN), so telemetry is never dropped
    silently. ``raw_files``: the JSON-lines exports the TSDB was loaded from, read to count NaN
    samples (VictoriaMetrics drops them): statistics are over the finite samples, and each NaN
    count is recorded in the statistic, its claim and ``missing``.

    Raises :class:`~ai4s_graph.tools.errors.ToolUnavailableError` when the TSDB is unreachable and
    :class:`InputError` when the job window is unknown."""
    pq = promql.PromQL(url)
    window, wsource, missing = job_window(pq, manifest)
    cov = pq.coverage(manifest.jobid, window)
    vendor = pq.detect_vendor(manifest.jobid, window)
    # VictoriaMetrics drops NaN samples at import: count them in the raw export, so a series of NaN
    # is reported as such, not as an absent one
    nans = (nan_counts(raw_files, manifest, [m for m, _ in TELEMETRY_STATS + CPU_STATS], window)
            if raw_files and cov.job_hosts else {})
    missing += _coverage_notes(manifest, cov, vendor, nans)
    findings: dict[str, Any] = {"url": url, "source": source, "window": list(window), "window_source": wsource,
                                "job_hosts": cov.job_hosts, "gpu_hosts": cov.gpu_hosts, "vendor": vendor,
                                "stats": {}, "series": {}, "units": {}, "missing": missing}
    chk = window_check(pq, manifest.jobid, window)
    if chk is not None:
        findings["window_check"] = chk
    findings["nan_samples"] = {m: {"finite": f, "nan": n} for m, (f, n) in nans.items()}
    claims = _stat_claims(pq, url, manifest, findings, nans)
    for metric in PLOT_METRICS:
        try:
            s = pq.job_series(metric, manifest.jobid, window, step_s=1.0)
        except Ai4sError:
            continue
        if s:
            findings["series"][metric] = s
            findings["units"][metric] = metrics.METRICS[metric].unit
    # the report's plot per host and GPU at the raw sample rate (issue 27 point 3): stored samples, not a grid
    if vendor not in (None, "none"):
        try:
            raw = pq.export(gpu_series.selectors(PLOT_METRICS, manifest.jobid), window[0] - rawstats.JOIN_MARGIN_S,
                            window[1] + rawstats.JOIN_MARGIN_S)
            findings["gpu_series"] = gpu_series.gpu_series(raw, PLOT_METRICS, manifest.jobid, window, vendor)
        except Ai4sError as e:
            missing.append(f"telemetry: per-GPU series for the plot: {e}")
    sc = _supports_compute_claim(findings, manifest)
    return findings, claims + ([sc] if sc is not None else [])


def telemetry_read(tel: dict[str, Any]) -> str:
    """What the telemetry statistics were read from, for the STATUS reason: the GPU vendor whose
    series matched the job's hosts (``nvidia``, ``amd``); ``cpu only`` when none did and the node
    (CPU) series gave a statistic (a CPU job, such as a ``--submit`` of ``cpu-toy``: the vendor was
    ``none``, once printed as ``telemetry (none)``); ``no GPU or CPU series`` when neither did."""
    vendor = tel.get("vendor")
    if vendor in ("nvidia", "amd"):
        return vendor
    return "cpu only" if tel.get("stats") else "no GPU or CPU series"


def cause_claims(state: AnalysisState, findings: dict[str, Any]) -> tuple[list[Claim], list[str]]:
    """The telemetry causes of the registry (``graph/rules/registry.py``) on the telemetry
    statistics, the manifest and the job script's fields. Adds ``triage`` (``[{id, lever, why}]``)
    to ``findings['telemetry']`` (created when absent); returns the claims and the causes' ``not
    checked: ... needs ...`` lines (issue 28: for the report, never for the agents' inputs)."""
    tel = findings.get("telemetry") or {}
    x = Inputs(telemetry=tel, manifest=state.get("manifest"), job=parse_job_script(job_script(state)))
    found = registry.detect(ANALYST, x)
    findings.setdefault("telemetry", tel)["triage"] = registry.lever_entries(found)
    return [f.claim for f in found], registry.not_checked(ANALYST, x)


@node(ANALYST)
def telemetry_analyst(state: AnalysisState) -> tuple[dict[str, Any], StatusLine]:
    """Figure of merit, precision discriminator and telemetry claims; each part that fails is
    named in ``missing`` and makes the node ``partial`` (``fail`` when nothing could be read)."""
    req = state["request"]
    manifest = state["manifest"]
    run_dir, out_dir = resolved_run_dir(state), Path(req.out_dir)
    findings: dict[str, Any] = {}
    claims: list[Claim] = []
    missing: list[str] = []
    parts: list[str] = []
    outcomes = []
    log = log_path(state)
    text = logtext.read_log(log)  # the one read of the log: the parser and the causes' facts share it
    findings["log"] = logtext.log_facts(log, text, registry.log_patterns())
    try:
        findings["fom"], c = analyze_fom(run_dir, manifest, out_dir, text, findings["log"])
        claims += c
        notes = findings["fom"].get("notes") or []
        esc = "".join(f" ({n.split(' (')[0]})" for n in notes if "escape sequence" in n)
        parts.append((f"FOM {findings['fom']['primary_fom_name']}={findings['fom']['primary_fom']:.4g}"
                      if findings["fom"].get("primary_fom") is not None else "FOM parsed") + esc)
        cut = [n for n in notes if "characters (the longest" in n]
        if cut:  # a cut line may have held a step: said, and the node is partial
            missing.append(f"{ANALYST}: training log: {cut[0]}")
            outcomes.append(Outcome.partial)
        if fom.steps_out_of_order(findings["fom"]):  # a shuffled / concatenated log: said, partial
            missing += [f"{ANALYST}: training log: {n}" for n in notes if fom.OUT_OF_ORDER in n]
            outcomes.append(Outcome.partial)
        if findings["fom"].get("loss_diverged"):
            f = findings["fom"]
            missing.append(f"{ANALYST}: training log: training diverged: {f['n_nonfinite_losses']} of {f['n_losses']} "
                           f"loss values are NaN/inf (first at {f['first_nonfinite_loss']})")
            outcomes.append(Outcome.partial)
    except Ai4sError as e:
        missing.append(f"{ANALYST}: training log: {e}")
        outcomes.append(Outcome.partial)
    if req.compare:
        try:
            findings["compare"], c = analyze_compare(run_dir, manifest, Path(req.compare))
            claims += c
            parts.append(f"precision discriminator {findings['compare']['verdict']}")
        except (Ai4sError, FileNotFoundError, ValueError) as e:
            missing.append(f"{ANALYST}: --compare: {e}")
            outcomes.append(Outcome.partial)
    problems: list[str] = []
    try:
        with tsdb_for(req, run_dir, manifest, problems) as (url, source):
            raw_files = None if req.tsdb_url else [run_dir / p for p in manifest.artifacts.telemetry]
            findings["telemetry"], c = analyze_telemetry(url, source, manifest, raw_files)
        claims += c
        parts.append(f"telemetry ({telemetry_read(findings['telemetry'])}) {len(c)} claims"
                     + (f" ({findings['telemetry']['gpus']})" if findings["telemetry"].get("gpus") else ""))
        problems += findings["telemetry"].pop("missing", [])
        if problems:
            missing += [f"{ANALYST}: {p}" for p in problems]
            outcomes.append(Outcome.partial)
    except Ai4sError as e:
        missing.append(f"{ANALYST}: telemetry: {e}")
        outcomes.append(Outcome.partial)
    found, not_checked = cause_claims(state, findings)
    claims += found
    update: dict[str, Any] = {"findings": findings, "claims": claims, "missing": missing, "not_checked": not_checked}
    if not claims:
        return update, StatusLine.make(Outcome.fail, "; ".join(m.split(": ", 1)[1] for m in missing) or "no input")
    llm_status = None  # the LLM pass's STATUS: a fallback is said after the deterministic reason
    if req.llm != "none":
        res = llm.analyst_pass(ANALYST, llm_request(state), {"manifest": llm_manifest(state), "findings": findings},
                               claims)
        update["usage"] = {ANALYST: res.usage}
        if res.claims is not None:  # the LLM's answer (JSON): validated into claims here
            update["claims"] = [Claim.model_validate(c) for c in res.claims]
        if res.prose:
            update["findings"]["omnistat_prose"] = res.prose
        llm_status = res.status
    status = worst(*outcomes)
    reason = "; ".join(parts)
    if missing:
        reason = f"{reason}; missing: {missing[0].split(': ', 1)[1]}" if reason else missing[0]
    return update, with_note(StatusLine.make(status, reason), llm_status)
