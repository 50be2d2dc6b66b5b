"""Score ``ai4s-graph run`` against injected faults with known causes (issue 19).

    python -m bench.accuracy score [--cases bench/accuracy/cases] [--results bench/accuracy/RESULTS.md]

Each case is a perf-run directory with ``truth.json`` ({cause, class, rank, notes}, see
``cases.py``). The scorer runs ``ai4s-graph run --job <jobid> --perf-run <case> --llm none``
on it in a fresh state directory and reads ``report.json``:

- **class**: ``bottleneck.klass`` equals the truth's class (cases whose truth class is None --
  the GPU shared with another process -- count as not applicable);
- **cause**: ``bottleneck.cause`` (a cause id of ``cases.CAUSES``) when the report has one, else
  the first cause whose keywords (:data:`CAUSE_WORDS`) occur in ``bottleneck.rationale``; a
  report that names no cause scores wrong. For a control or any run with truth cause ``none`` the
  answer is right when the report names no cause, or one the truth lists in ``present`` (what the
  control does have by measurement, ``measured.py``): a control must not be given a cause it does
  not have (issue 24). A case whose truth says ``score_cause: false`` (its injected cause had no
  measurable effect) is scored for its class only;
- **rank**: for cases with a rank at fault, ``bottleneck.rank`` when present, else the rank of a
  claim whose metric names a straggler (``...straggler...``) with an integer value;
- **first lever**: for cases whose truth names a ``lever`` (``cases.LEVERS``) and whose cause is
  scored, the name of the report's first lever (``levers[0].name``) equals it;
- **lead**: on every case whose report names no cause, whether its lead (``bottleneck.lead``, the
  step's largest attribution, issue 34 point 5) points at the truth: its ``category`` is one of
  :data:`LEAD_TRUTH` of the truth's cause (of its class, :data:`LEAD_CLASS`, for a control); a
  report without a lead scores wrong there; not scored where a cause is named;
- **claims confirmed**: the share of the report's claims with verdict ``confirmed``;
- **wrong confident**: a class other than ``unknown`` that is not the truth's class (counted
  apart from ``unknown``, which is a miss but not a wrong answer).

Per fault kind (cause) and overall. The result is JSON (``--json``) and, with ``--results``,
a markdown table with the date and the commit.

The floor (``floor.json``, ``--write-floor`` from a measured score) is per case: which answers of
each case were right and whether it was wrong confident; ``--check-floor`` (and the CI test) fail
when a case of the floor loses a right answer, turns wrong confident, or is gone. A case not in
the floor yet (bundled after the floor was measured) is listed, not failed. A floor of the first
format (totals over the whole set, ``cases``: N) is checked as totals only on a set of N cases.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CASES_DIR = HERE / "cases"
FLOOR = HERE / "floor.json"

CAUSE_WORDS: dict[str, tuple[str, ...]] = {
    "dataloader-stall": ("dataloader", "data loader", "data-loader", "num_workers"),
    "straggler": ("straggler",),
    "slow-link": ("nccl_p2p_disable", "p2p disabled", "slow link", "slow fabric", "host shared memory"),
    "exposed-communication": ("exposed communication", "exposed comm", "communication-bound"),
    "host-sync": ("host sync", "host-sync", ".item()", "synchronize", "cudastreamsynchronize"),
    "kernel-launch-overhead": ("launch overhead", "kernel launch", "launch-bound"),
    "memory-bound-elementwise": ("elementwise", "bandwidth-bound", "memory-bound"),
    "compute-bound-gemm": ("gemm", "matmul", "tensor core"),
    "sdpa-math-fallback": ("sdpa", "math backend", "flash attention", "scaled_dot_product"),
    "recompilation": ("recompil", "dynamo", "torch.compile"),
    "cuda-launch-blocking": ("cuda_launch_blocking", "launch blocking"),
    "gpu-contention": ("another process", "second process", "contention", "shared gpu"),
}
"""Keywords that name a cause in a rationale (lower case; first match in this order wins, more
specific causes first in :data:`_MATCH_ORDER`)."""

_MATCH_ORDER = ("cuda-launch-blocking", "recompilation", "sdpa-math-fallback", "gpu-contention", "straggler",
                "slow-link", "host-sync", "dataloader-stall", "kernel-launch-overhead", "memory-bound-elementwise",
                "compute-bound-gemm", "exposed-communication")


_GPU, _COMM, _COPY = "gpu:computation", "gpu:communication", "gpu:memcpy"
LEAD_TRUTH: dict[str, frozenset[str]] = {k: frozenset(v) for k, v in {
    # GPU time: the kernels themselves are slow or many
    "compute-bound-gemm": (_GPU,), "memory-bound-elementwise": (_GPU,), "sdpa-math-fallback": (_GPU,),
    "tf32-off": (_GPU,), "activation-checkpointing": (_GPU,), "nchw-conv-layout": (_GPU,),
    "cudnn-benchmark-off": (_GPU,), "gpu-contention": (_GPU,),
    # communication no computation hides (the straggler's waiting ranks; the critical rank computes)
    "exposed-communication": (_COMM,), "slow-link": (_COMM,), "ddp-small-buckets": (_COMM,),
    "fsdp-no-prefetch": (_COMM,), "straggler": (_GPU, _COMM), "straggler-host": ("outside_ops", "op", _COMM),
    # host side, by the host category the mechanism spends its time in (tools/trace/host_names.py)
    "dataloader-stall": ("dataloader",), "dataloader-worker-respawn": ("dataloader",),
    "dataloader-shallow-prefetch": ("dataloader",), "dataloader-cpu-transform": ("dataloader",),
    "dataloader-io-wait": ("dataloader",), "cpu-oversubscription": ("dataloader", "op"),
    "host-sync": ("sync",), "cuda-launch-blocking": ("launch", "sync"),
    "kernel-launch-overhead": ("launch", "op"),  # the host's cost per kernel: the op's dispatch, then its launch
    "pageable-h2d-copy": (_COPY, "sync"), "d2h-param-copy": ("sync", _COPY),
    "checkpoint-io-per-step": ("outside_ops", "sync", _COPY),
    "per-parameter-optimizer": ("optimizer", "launch"), "allocator-churn": ("allocator",),
    "anomaly-mode": ("op", "sync"), "per-sample-loop": ("op", "launch"),
    "cpu-preprocess-in-step": ("op",), "python-outside-ops": ("outside_ops",), "gc-pause": ("outside_ops",),
    "recompilation": ("op", "outside_ops"), "graph-break": ("op", "outside_ops"),
    "ddp-find-unused-parameters": ("op",),
}.items()}
"""Truth cause id (``cases.CAUSES``) -> the lead categories (``tools/report/lead.py:LEAD_CATEGORIES``:
the GPU-busy parts and the host categories of the GPU-idle time) that point at it: where the
mechanism of ``cases.CAUSES``' description spends the step's time (a sync-per-op mechanism waits in
``sync``; a per-op Python cost is the op's CPU side, ``op``; a torch.save's copies block in ``sync``
and its file writes are outside every op)."""
LEAD_CLASS: dict[str, frozenset[str]] = {k: frozenset(v) for k, v in {
    "compute-bound": (_GPU,), "memory-bound": (_GPU,), "communication-bound": (_COMM,),
    "data-loader-bound": ("dataloader",),
    "dispatch-bound": ("launch", "op", "outside_ops", "sync", "allocator", "optimizer", "runtime_other"),
}.items()}
"""Truth class -> the lead categories that point at it, for a control (truth cause ``none``): a GPU
busy in its kernels, communication, the loader, or the host issuing the work (any host state but
the loader)."""


def lead_right(truth: dict[str, Any], report: dict[str, Any] | None) -> bool | None:
    """Whether the report's lead points at the truth (see the module docstring); None when the
    report names a cause, the truth's cause is not scored, or a control's truth has no class."""
    if truth.get("score_cause") is False or report is None or named_cause(report) is not None:
        return None
    want = LEAD_TRUTH.get(truth["cause"]) if truth["cause"] != "none" else LEAD_CLASS.get(truth.get("class") or "")
    if want is None:
        return None
    lead = (report.get("bottleneck") or {}).get("lead") or {}
    return lead.get("category") in want


def load_cases(root: Path) -> list[tuple[Path, dict[str, Any]]]:
    """Case directories under ``root`` (each with truth.json and manifest.json), sorted by name.
    Raises FileNotFoundError when there are none."""
    out = []
    for d in sorted(p for p in Path(root).iterdir() if p.is_dir()):
        t = d / "truth.json"
        if t.exists() and (d / "manifest.json").exists():
            out.append((d, json.loads(t.read_text())))
    if not out:
        raise FileNotFoundError(f"no cases (directories with truth.json and manifest.json) under {root}")
    return out


def named_cause(report: dict[str, Any]) -> str | None:
    """The cause a report names: ``bottleneck.cause`` when the report has that field (None: it
    names none); a keyword match in the rationale only for a report written before the field."""
    b = report.get("bottleneck") or {}
    if "cause" in b:
        return str(b["cause"]) if b["cause"] else None
    text = str(b.get("rationale") or "").lower()
    for cause in _MATCH_ORDER:
        if any(w in text for w in CAUSE_WORDS[cause]):
            return cause
    return None


def named_rank(report: dict[str, Any]) -> int | None:
    """The rank a report blames: ``bottleneck.rank`` if set, else a straggler claim's value."""
    b = report.get("bottleneck") or {}
    if b.get("rank") is not None:
        return int(b["rank"])
    for vc in report.get("claims") or []:
        c = vc.get("claim") or {}
        if "straggler" in str(c.get("metric", "")).lower() and isinstance(c.get("value"), (int, float)) \
                and not isinstance(c.get("value"), bool) and float(c["value"]).is_integer():
            return int(c["value"])
    for vc in report.get("claims") or []:
        c = vc.get("claim") or {}
        if "straggler" in str(c.get("metric", "")).lower():
            m = re.search(r"rank\s+(\d+)", str(c.get("statement", "")))
            if m:
                return int(m.group(1))
    return None


def first_lever(report: dict[str, Any]) -> str | None:
    """The name of the report's first lever (``levers[0].name``), None when it has none."""
    levers = report.get("levers") or []
    return str(levers[0].get("name")) if levers and isinstance(levers[0], dict) and levers[0].get("name") else None


def cause_right(truth: dict[str, Any], cause: str | None) -> bool | None:
    """Whether ``cause`` (the cause a report names, None for none) is right for ``truth``: the
    injected cause for a case; no cause, or one of ``truth["present"]``, for a run whose cause is
    ``none``; None (not scored) when the truth says ``score_cause: false``."""
    if truth.get("score_cause") is False:
        return None
    if truth["cause"] == "none":
        return cause in (None, "none") or cause in (truth.get("present") or ())
    return cause == truth["cause"]


def judge(truth: dict[str, Any], report: dict[str, Any] | None, error: str = "") -> dict[str, Any]:
    """One case's score from its truth and report (None when the run failed): the named class,
    cause, rank and first lever, each ``*_ok`` True/False, or None where not scored."""
    row: dict[str, Any] = {"cause": truth["cause"], "truth_class": truth.get("class"), "truth_rank": truth.get("rank"),
                           "truth_lever": truth.get("lever")}
    scored_lever = bool(truth.get("lever")) and truth.get("score_cause") is not False
    if report is None:
        return {**row, "class": None, "named_cause": None, "named_rank": None, "class_ok": False if truth.get("class")
                else None, "cause_ok": None if truth.get("score_cause") is False else False,
                "rank_ok": False if truth.get("rank") is not None else None, "lead": None, "lead_ok": None,
                "first_lever": None, "lever_ok": False if scored_lever else None,
                "claims": 0, "confirmed": 0, "wrong_confident": False, "unknown": False, "error": error}
    klass = (report.get("bottleneck") or {}).get("klass")
    claims = report.get("claims") or []
    conf = sum(1 for c in claims if c.get("verdict") == "confirmed")
    tc = truth.get("class")
    cause = named_cause(report)
    rank = named_rank(report)
    lever = first_lever(report)
    return {**row, "class": klass, "named_cause": cause, "named_rank": rank, "first_lever": lever,
            "lever_ok": (lever == truth["lever"]) if scored_lever else None,
            "class_ok": (klass == tc) if tc else None,
            "cause_ok": cause_right(truth, cause),
            "rank_ok": (rank == truth["rank"]) if truth.get("rank") is not None else None,
            "lead": ((report.get("bottleneck") or {}).get("lead") or {}).get("category"),
            "lead_ok": lead_right(truth, report),
            "claims": len(claims), "confirmed": conf,
            "wrong_confident": bool(tc) and klass not in (None, "unknown", tc), "unknown": klass in (None, "unknown"),
            "error": ""}


def run_case(case: Path, truth: dict[str, Any], work: Path, timeout: float = 600) -> dict[str, Any]:
    """``ai4s-graph run`` on one case (deterministic path, fresh state) and its score."""
    man = json.loads((case / "manifest.json").read_text())
    out = work / case.name
    env = {**os.environ, "AI4S_STATE_DIR": str(work / ".state" / case.name),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    for k in ("ANTHROPIC_API_KEY", "AI4S_TSDB_URL"):
        env.pop(k, None)
    cmd = [sys.executable, "-m", "ai4s_graph.cli", "run", "--job", str(man["jobid"]), "--perf-run", str(case),
           "--out", str(out), "--llm", "none", "--fresh", "--workers", "1"]
    try:
        cp = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, cwd=REPO)
    except subprocess.TimeoutExpired:
        return {"case": case.name, **judge(truth, None, f"timed out after {timeout:.0f} s")}
    rep = out / "report.json"
    if not rep.exists():
        tail = (cp.stderr or cp.stdout).strip().splitlines()[-1:] or [f"exit {cp.returncode}"]
        return {"case": case.name, **judge(truth, None, tail[0][:300])}
    return {"case": case.name, **judge(truth, json.loads(rep.read_text()))}


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Accuracy per fault kind (cause) and overall: right class / cause / rank as
    ``[right, applicable]`` and a fraction, claims confirmed, wrong confident, unknown."""
    def agg(rs: list[dict[str, Any]]) -> dict[str, Any]:
        def frac(key: str) -> dict[str, Any]:
            app = [r for r in rs if r[key] is not None]
            ok = sum(1 for r in app if r[key])
            return {"right": ok, "of": len(app), "accuracy": round(ok / len(app), 3) if app else None}
        claims = sum(r["claims"] for r in rs)
        return {"cases": len(rs), "class": frac("class_ok"), "cause": frac("cause_ok"), "rank": frac("rank_ok"),
                "lever": frac("lever_ok"), "lead": frac("lead_ok"),
                "claims": claims, "claims_confirmed": sum(r["confirmed"] for r in rs),
                "claims_confirmed_share": round(sum(r["confirmed"] for r in rs) / claims, 3) if claims else None,
                "wrong_confident": sum(1 for r in rs if r["wrong_confident"]),
                "unknown": sum(1 for r in rs if r["unknown"]), "failed_runs": sum(1 for r in rs if r["error"])}
    kinds = sorted({r["cause"] for r in rows})
    return {"overall": agg(rows), "by_cause": {k: agg([r for r in rows if r["cause"] == k]) for k in kinds},
            "cases": rows}


class _Progress:
    """One line per finished case on stderr (``[3/12] case-name: class right, 41 s``), or a rich bar
    when stderr is a terminal; silent with ``quiet``."""

    def __init__(self, total: int, quiet: bool = False) -> None:
        self.total, self.done, self.quiet, self.t0 = total, 0, quiet, time.monotonic()
        self.lock = threading.Lock()
        self.bar = None
        if not quiet and sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(TextColumn("accuracy cases"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                console=Console(stderr=True), transient=True)
            self.bar.start()
            self.task = self.bar.add_task("cases", total=total)

    def case_done(self, row: dict[str, Any]) -> None:
        with self.lock:
            self.done += 1
            if self.quiet:
                return
            if self.bar is not None:
                self.bar.update(self.task, completed=self.done)
                return
            ok = {True: "right", False: "wrong", None: "not scored"}
            verdict = ("failed: " + str(row.get("error"))[:80] if row.get("error") else
                       f"class {row.get('class')} ({ok[row.get('class_ok')]}), cause {ok[row.get('cause_ok')]}")
            print(f"[{self.done}/{self.total}] {row.get('case')}: {verdict}, {time.monotonic() - self.t0:.0f} s",
                  file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def score(cases_dir: Path = CASES_DIR, workers: int = 2, work: Path | None = None,
          quiet: bool = False) -> dict[str, Any]:
    """Run every case under ``cases_dir`` (``workers`` at a time) and summarize; a line per finished
    case goes to stderr (:class:`_Progress`) unless ``quiet``."""
    cases = load_cases(cases_dir)
    tmp = tempfile.TemporaryDirectory(prefix="ai4s-acc-") if work is None else None
    wd = Path(tmp.name) if tmp else Path(work)
    wd.mkdir(parents=True, exist_ok=True)
    progress = _Progress(len(cases), quiet)

    def one(ct: tuple[Path, dict[str, Any]]) -> dict[str, Any]:
        row = run_case(ct[0], ct[1], wd)
        progress.case_done(row)
        return row

    try:
        with ThreadPoolExecutor(max_workers=max(1, workers)) as ex:
            rows = list(ex.map(one, cases))
    finally:
        progress.close()
        if tmp:
            tmp.cleanup()
    return summarize(rows)


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO,
                              timeout=10).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _pct(d: dict[str, Any]) -> str:
    return "n/a" if not d["of"] else f"{d['right']}/{d['of']}"


def markdown(res: dict[str, Any], cases_dir: Path) -> str:
    """RESULTS.md: the per-cause table, overall line, and each case's answer."""
    o = res["overall"]
    lines = [f"# Accuracy benchmark (injected faults with known causes)", "",
             f"Date {_dt.datetime.now(_dt.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}, commit `{_commit()}`, "
             f"cases `{os.path.relpath(cases_dir, REPO)}` ({o['cases']}), `python -m bench.accuracy score`.", "",
             "| fault kind (cause) | cases | right class | right cause | right rank | right first lever | "
             "right lead (no cause named) | claims confirmed | wrong confident | unknown |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for k, a in res["by_cause"].items():
        lines.append(f"| {k} | {a['cases']} | {_pct(a['class'])} | {_pct(a['cause'])} | {_pct(a['rank'])} | "
                     f"{_pct(a['lever'])} | {_pct(a['lead'])} | {a['claims_confirmed']}/{a['claims']} | {a['wrong_confident']} | "
                     f"{a['unknown']} |")
    lines.append(f"| **overall** | {o['cases']} | {_pct(o['class'])} | {_pct(o['cause'])} | {_pct(o['rank'])} | "
                 f"{_pct(o['lever'])} | {_pct(o['lead'])} | {o['claims_confirmed']}/{o['claims']} | {o['wrong_confident']} | "
                 f"{o['unknown']} |")
    lines += ["", "| case | truth class | answered class | truth cause | named cause | truth rank | named rank | "
              "truth lever | first lever | lead | error |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in res["cases"]:
        lines.append(f"| {r['case']} | {r['truth_class']} | {r['class']} | {r['cause']} | {r['named_cause']} | "
                     f"{r['truth_rank']} | {r['named_rank']} | {r.get('truth_lever')} | {r.get('first_lever')} | "
                     f"{r.get('lead') or '—'}{'' if r.get('lead_ok') is None else (' ✓' if r['lead_ok'] else ' ✗')} | "
                     f"{r['error']} |")
    return "\n".join(lines) + "\n"


ANSWERS = ("class_ok", "cause_ok", "rank_ok", "lever_ok", "lead_ok")
"""The per-case answers the floor keeps (``lead_ok``: the labelled lead of a case that names no
cause; a floor written before it holds no ``lead_ok``, which then checks nothing)."""


def floor_from(res: dict[str, Any]) -> dict[str, Any]:
    """The floor file's content from a measured result: per case, each answer of :data:`ANSWERS`
    (True, False, or None where not scored) and ``wrong_confident``; the totals beside, for reading."""
    o = res["overall"]
    return {"version": 2, "cases": {r["case"]: {**{k: r[k] for k in ANSWERS}, "wrong_confident": r["wrong_confident"]}
                                    for r in res["cases"]},
            "totals": {"cases": o["cases"], "class_right": o["class"]["right"], "cause_right": o["cause"]["right"],
                       "rank_right": o["rank"]["right"], "lever_right": o["lever"]["right"],
                       "lead_right": o["lead"]["right"],
                       "claims_confirmed": o["claims_confirmed"], "wrong_confident": o["wrong_confident"]}}


def check_floor(res: dict[str, Any], floor: dict[str, Any]) -> list[str]:
    """Regressions against ``floor`` (empty when none). Per case (``version`` 2): an answer right in
    the floor that is not right now, a case turned wrong confident, a case of the floor missing.
    A first-format floor (totals: ``cases``, ``class_right``, ...) is compared as totals, and only on
    a set of as many cases as it was measured on (else the one regression says so). The
    confirmed-claim count is recorded but not checked (it moves when the analysis adds or merges
    claims, which is not an accuracy change)."""
    o = res["overall"]
    if floor.get("version") != 2:
        if o["cases"] != floor.get("cases"):
            return [f"the floor was measured on {floor.get('cases')} cases (totals), this set has {o['cases']}: "
                    "measure it again (--write-floor)"]
        bad = [f"{key}: {got} < floor {floor[key]}" for key, got in
               (("class_right", o["class"]["right"]), ("cause_right", o["cause"]["right"]),
                ("rank_right", o["rank"]["right"])) if got < floor.get(key, 0)]
        if o["wrong_confident"] > floor.get("wrong_confident_max", o["wrong_confident"]):
            bad.append(f"wrong_confident: {o['wrong_confident']} > ceiling {floor['wrong_confident_max']}")
        return bad
    now = {r["case"]: r for r in res["cases"]}
    bad = []
    for case, was in sorted(floor["cases"].items()):
        r = now.get(case)
        if r is None:
            bad.append(f"{case}: in the floor, not in this set")
            continue
        lost = [k for k in ANSWERS if was.get(k) is True and r.get(k) is not True]
        if lost:
            bad.append(f"{case}: {', '.join(lost)} right in the floor, not now")
        if r["wrong_confident"] and not was.get("wrong_confident"):
            bad.append(f"{case}: wrong confident (class {r['class']}, truth {r['truth_class']})")
    return bad


def not_in_floor(res: dict[str, Any], floor: dict[str, Any]) -> list[str]:
    """Cases of ``res`` a per-case floor does not hold yet (bundled after it was measured)."""
    held = floor.get("cases") if floor.get("version") == 2 else {}
    return sorted(r["case"] for r in res["cases"] if r["case"] not in held)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.accuracy", description="accuracy benchmark scorer")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("score", help="run ai4s-graph on every case and score it")
    s.add_argument("--cases", default=str(CASES_DIR))
    s.add_argument("--workers", type=int, default=2)
    s.add_argument("--json", default=None, help="write the full result here")
    s.add_argument("--results", default=None, help="write the markdown table here (e.g. bench/accuracy/RESULTS.md)")
    s.add_argument("--write-floor", action="store_true", help="record the measured score as bench/accuracy/floor.json")
    s.add_argument("--check-floor", action="store_true", help="exit 1 when the score is below floor.json")
    s.add_argument("-q", "--quiet", action="store_true", help="no progress lines on stderr")
    a = ap.parse_args(argv)
    try:
        res = score(Path(a.cases), a.workers, quiet=a.quiet)
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        print(f"STATUS=fail; reason={e}")
        return 2
    o = res["overall"]
    print(f"cases {o['cases']}: class {_pct(o['class'])}, cause {_pct(o['cause'])}, rank {_pct(o['rank'])}, "
          f"first lever {_pct(o['lever'])}, lead (no cause named) {_pct(o['lead'])}, "
          f"claims confirmed {o['claims_confirmed']}/{o['claims']}, wrong confident {o['wrong_confident']}, "
          f"unknown {o['unknown']}, failed runs {o['failed_runs']}")
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1) + "\n")
    if a.results:
        Path(a.results).write_text(markdown(res, Path(a.cases)))
    if a.write_floor:
        FLOOR.write_text(json.dumps(floor_from(res), indent=1) + "\n")
    if a.check_floor:
        floor = json.loads(FLOOR.read_text())
        bad = check_floor(res, floor)
        new = not_in_floor(res, floor)
        if new:
            print(f"not in the floor yet ({len(new)}): {', '.join(new)}", file=sys.stderr)
        if bad:
            print("below the floor: " + "; ".join(bad), file=sys.stderr)
            return 1
    return 0
