"""The telemetry and figure-of-merit verifier. Claims are CHECKED here, by paths independent of
the analyst's:

- telemetry statistics from the RAW samples (the run's JSON-lines export, or VictoriaMetrics'
  ``/api/v1/export`` for a live TSDB) inside each instance's ``rmsjob_info`` window, in plain
  Python — no PromQL, no subquery resampling;
- figures of merit from a second, minimal reading of ``train.log`` (regular expressions of its
  own, numpy medians), using the warm-up count the analyst declared;
- the precision discriminator from those re-read step times.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..configuration import llm_manifest, llm_request, run_dir
from ..inputs import cause_reader, verifier_log
from ..schema import AnalysisState
from ...agents import llm
from ...rules import registry
from ...rules.diagnosis import telemetry_supports_compute
from ...rules.figures import Reader, fom_value
from ...runtime import node
from ....state import Claim, Outcome, StatusLine, Tolerance, VerifiedClaim, with_note
from ....state.claimkit import REL_TOL, TELEMETRY_TOL
from ....tools.errors import Ai4sError
from ....tools.slurm import client as slurm
from ....tools.slurm.probe import probe_verdicts
from ....tools.telemetry import export, rawstats
from ....tools.telemetry.subwindow import raw_subwindow_stat, subwindow_of
from ....tools.trainlog import fom as fom_tool
from ....tools.trainlog.reread import reread_log

VERIFIER = "telemetry_verifier"


def _judge(c: Claim, value: Any, tol: Tolerance, method: str, note: str = "") -> VerifiedClaim:
    return registry.judge(c, VERIFIER, value, tol, method, note)


def _steady(rr: dict[str, Any], warmup: int) -> float | None:
    """The median steady step of a re-read log past ``warmup`` steps (:func:`~...rules.figures.fom_value`)."""
    return fom_value("fom.steady_step_time_s", Reader(log=rr, warmup=warmup))


def _verify_fom(c: Claim, state: AnalysisState) -> VerifiedClaim:
    manifest = state["manifest"]
    fom = (state.get("findings") or {}).get("fom") or {}
    metric = c.metric
    if metric.startswith("fom."):
        r = Reader(log=verifier_log(state), warmup=int(fom.get("warmup_steps_skipped") or 0),
                   global_batch_size=manifest.global_batch_size)
        fig, _ = registry.figure_of(metric)
        v = fig.rederive(r, c).value if fig is not None else fom_value(metric, r)
        return _judge(c, v, fig.tolerance if fig is not None else REL_TOL, "own re-read of train.log (rank-0 step "
                      f"lines, median after the declared {fom.get('warmup_steps_skipped', 0)} warm-up steps)")
    # precision discriminator
    cmp = (state.get("findings") or {}).get("compare") or {}
    ev = c.evidence[0].args
    if not cmp or "hi_log" not in ev:
        return _judge(c, None, Tolerance(), "no comparison run to re-read")
    pats = registry.log_patterns(verifier=True)
    hi = reread_log(Path(ev["hi_log"]), pats)
    lo = reread_log(Path(ev["lo_log"]), pats)
    t_hi = _steady(hi, int(cmp.get("hi_warmup", 0) or 0))
    t_lo = _steady(lo, int(cmp.get("lo_warmup", 0) or 0))
    if not t_hi or not t_lo:
        return _judge(c, None, Tolerance(), "comparison logs have no step times")
    speed = t_hi / t_lo
    method = "own re-read of both train.log files, median step times"
    if metric == "compare.precision_speedup":
        return _judge(c, round(speed, 6), REL_TOL, method)
    v = fom_tool.compare_precision(t_hi, t_lo, hi=cmp["hi"], lo=cmp["lo"])
    return _judge(c, v.bottleneck_class.value, Tolerance(), method + ", the lesson-13/22 thresholds")


def _raw_series(state: AnalysisState) -> tuple[list[Any], str]:
    req = state["request"]
    manifest = state["manifest"]
    files = [run_dir(state) / p for p in manifest.artifacts.telemetry]
    if files:
        series = [s for f in files for s in export.load_export(f, manifest.gpu)]
        return series, f"raw samples of {', '.join(f.name for f in files)}"
    tel = (state.get("findings") or {}).get("telemetry") or {}
    url = tel.get("url") or req.tsdb_url
    window = tel.get("window")
    names = ['{__name__=~"DCGM_FI_.*|rocm_.*|node_.*|rmsjob_info"}']
    series = export.export_raw(url, names, window[0] - 600 if window else None, window[1] + 600 if window else None,
                               gpu_name=manifest.gpu)
    return series, f"raw samples from {url}/api/v1/export"


def verifier_window(state: AnalysisState) -> tuple[tuple[float, float] | None, str]:
    """The window the verifier re-derives telemetry over, and where it comes from, in words.

    The analyst's window is the manifest's SLURM start/end. An independent source is ``sacct``
    when SLURM still knows the job (a live cluster); otherwise the same manifest times are used
    and the returned text says that both rely on one source. ``(None, ...)`` when the analyst had
    no SLURM window either (then each host's ``rmsjob_info`` span is used, also said)."""
    manifest = state["manifest"]
    tel = (state.get("findings") or {}).get("telemetry") or {}
    analyst_src = str(tel.get("window_source") or "")
    try:
        rec = slurm.sacct(manifest.jobid)
    except Ai4sError:
        rec = None
    if rec is not None and rec.start is not None and rec.end is not None and rec.end > rec.start:
        return (rec.start, rec.end), f"window from sacct (job {manifest.jobid}: {rec.state}), independent of the manifest"
    if manifest.start is not None and manifest.end is not None and manifest.end > manifest.start:
        same = "the same source as the analyst's" if analyst_src.startswith("SLURM") else "not the analyst's"
        return ((manifest.start, manifest.end),
                f"window from manifest.json's SLURM start/end, {same} (sacct does not know job {manifest.jobid})")
    return None, "window from each host's rmsjob_info span, the same source as the analyst's (no SLURM times)"


def _window_note(state: AnalysisState) -> str:
    """A contradiction between the SLURM window and rmsjob_info's span, in words ('' if none):
    rmsjob_info lagging the job by more than two of its own scrape intervals (at least 1 s)."""
    chk = ((state.get("findings") or {}).get("telemetry") or {}).get("window_check") or {}
    after, before = chk.get("after_s"), chk.get("before_s")
    slack = max(1.0, 2 * (chk.get("interval_s") or 0.0))
    parts = []
    if after is not None and after > slack:
        parts.append(f"rmsjob_info continues {after:.0f} s after the job's SLURM end (a stale series: it is not "
                     "used as the clock)")
    if before is not None and before > slack:
        parts.append(f"rmsjob_info starts {before:.0f} s before the job's SLURM start")
    return "; ".join(parts)


def _verify_telemetry(claims: list[Claim], state: AnalysisState) -> list[VerifiedClaim]:
    manifest = state["manifest"]
    try:
        series, how = _raw_series(state)
    except Ai4sError as e:
        return [_judge(c, None, Tolerance(), "raw telemetry unavailable", note=str(e)) for c in claims]
    window, wtext = verifier_window(state)
    cards = any(s.name == "rmsjob_info" and s.metric.get("jobid") == manifest.jobid and "card" in s.metric for s in series)
    method = (f"{how}, {wtext}, joined by host{' and card' if cards else ''} through rmsjob_info, plain Python "
              "statistics (no PromQL)")
    note = _window_note(state)
    raw: dict[str, float | None] = {}
    out = []
    for c in claims:
        parts = c.metric.split(".")
        if c.metric == "telemetry.supports_compute":
            continue
        metric, stat = parts[1], parts[2]
        sub = subwindow_of(c.evidence[0].args if c.evidence else None)  # a sub-window claim: over ITS window
        try:
            if sub is None:
                v = rawstats.raw_job_stat(series, metric, manifest.jobid, stat, window=window)
            else:  # the offsets count from the analyst's window (the findings'), else this one
                tel_win = ((state.get("findings") or {}).get("telemetry") or {}).get("window")
                base = tuple(tel_win) if tel_win else window
                v = raw_subwindow_stat(series, metric, manifest.jobid, stat, *sub, base)[0].value
        except Ai4sError as e:
            out.append(_judge(c, None, Tolerance(), method, note=str(e)))
            continue
        if sub is None:
            raw[f"{metric}.{stat}"] = v
        fig, _ = registry.figure_of(c.metric)  # telemetry.{metric}.{stat}[.qualifier]
        out.append(_judge(c, None if v is None else round(v, 6), fig.tolerance if fig else TELEMETRY_TOL, method,
                          note=note))
    for c in claims:
        if c.metric == "telemetry.supports_compute":
            sup = telemetry_supports_compute(raw.get("gpu_util.avg"), raw.get("sm_clock.avg"), raw.get("sm_clock.max"),
                                             raw.get("power.avg"), raw.get("power.max"), gpu_name=manifest.gpu)
            out.append(_judge(c, sup, Tolerance(), method + ", same rule on the raw statistics"))
    return out


@node(VERIFIER)
def telemetry_verifier(state: AnalysisState) -> tuple[dict[str, Any], StatusLine]:
    """Re-derive every telemetry, FOM and discriminator claim; a refuted claim stays in the report."""
    claims = [c for c in state.get("claims") or [] if c.analyst == "telemetry_analyst"]
    if not claims:
        return {}, StatusLine.make(Outcome.partial, "no telemetry or FOM claims to verify")
    verdicts: list[VerifiedClaim] = []
    tel = [c for c in claims if c.metric.startswith("telemetry.")]
    for c in claims:
        if c.metric.startswith("telemetry."):
            continue
        if c.id.startswith("triage."):
            rd = registry.rederive(c, cause_reader(state, [c]))
            verdicts.append(_judge(c, rd.value, rd.tolerance or Tolerance(), rd.method or ""))
            continue
        try:
            verdicts.append(_verify_fom(c, state))
        except (Ai4sError, OSError) as e:
            verdicts.append(_judge(c, None, Tolerance(), "re-derivation failed", note=str(e)))
    if tel:
        verdicts.extend(_verify_telemetry(tel, state))
    if state["request"].probe:  # --probe: one srun -N1 gpu_clocks check on one of the job's nodes
        verdicts = probe_verdicts(verdicts, state["manifest"].nodes_list)
    update: dict[str, Any] = {"verdicts": verdicts}
    llm_status = None  # the LLM pass's STATUS: a fallback is said after the deterministic reason
    if state["request"].llm != "none":
        res = llm.verifier_pass(VERIFIER, llm_request(state), {"manifest": llm_manifest(state),
                                                "findings": {k: v for k, v in (state.get("findings") or {}).items()
                                                             if k in ("fom", "telemetry", "compare")}}, verdicts)
        update["usage"] = {VERIFIER: res.usage}
        if res.verdicts is not None:  # the LLM's answer (JSON): validated into verdicts here
            update["verdicts"] = [VerifiedClaim.model_validate(v) for v in res.verdicts]
        llm_status = res.status
    counts: dict[str, int] = {}
    for v in update["verdicts"]:
        k = v.verdict.value
        counts[k] = counts.get(k, 0) + 1
    st = Outcome.ok if counts.get("inconclusive", 0) == 0 else Outcome.partial
    return update, with_note(StatusLine.make(st, ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))), llm_status)
