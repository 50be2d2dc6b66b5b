"""Typed wrappers over the SLURM client commands: ``sbatch``, ``sacct``, ``scontrol``, ``srun``.

Everything runs the real commands (no REST API, no mocks). Accounting is asynchronous: a job that
has just left ``squeue`` may take 0.1-1 s to show its final state in ``sacct``, and right after
``sbatch`` sacct may have no row at all -- so the waiting is a poll, never a single read
(/work/shared/notes/local-slurm.md, pitfall 9). PREEMPTED and REQUEUED are not terminal: the job
comes back (seed 000, "When something goes wrong").

The cluster config (``.cluster-config.yaml``) gives partition, account and the shared directory;
see ``sbatch/cluster-config.example.yaml``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Iterable

import hostlist
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ...state.manifest import TERMINAL_STATES
from ..errors import InputError, ToolUnavailableError

__all__ = [
    "ClusterConfig", "SacctRecord", "WaitTimeout", "TERMINAL_STATES", "check_jobid", "expand_hostlist",
    "job_record", "load_cluster_config", "parse_parsable", "parse_sacct", "sacct", "sbatch", "scancel",
    "scontrol_show_job", "srun_probe", "wait_for_terminal",
]

#: SLURM's job id syntax (sbatch(1), "JOB ID" forms of squeue/sacct): a number, an array task
#: ``123_4`` or task set ``123_[1-3,7]`` (``%N`` throttle allowed), a het-job component ``123+0``.
JOBID_SYNTAX = r"\d+(?:_(?:\d+|\[[0-9,\-%]+\]))?(?:\+\d+)?"
_JOBID = re.compile(rf"^{JOBID_SYNTAX}$")
_SAFE_NODE = re.compile(r"^[A-Za-z0-9._\-\[\],]+$")
DEFAULT_CONFIG_NAMES = (".cluster-config.yaml", ".cluster-config.yml")


class ClusterConfig(BaseModel):
    """Site settings the launcher and the verifiers' probe read (``.cluster-config.yaml``).

    - ``partition`` / ``account``: passed to sbatch/srun (seed 000: "Partition / account: read from
      .cluster-config.yaml"); ``account`` may be None where the site needs none.
    - ``shared_dir``: ``$AI4S_SHARED_DIR`` on the compute nodes; artifacts go to
      ``<shared_dir>/models/<model>/perf-runs/<jobid>/``.
    - ``container_image``: SIF path the probe checks on every node (optional).
    - ``probe_paths``: extra per-node paths the mount-health probe checks; ``{node}`` is replaced by
      the node name (e.g. a node-local scratch mount).
    - ``omnistat`` / ``omnistat_dir`` / ``omnistat_config_template``: render the Omnistat user-mode
      block (seed lessons 1-3). ``victoria_metrics_url``: the user-mode TSDB the jobs push to and the
      analysts query. ``python``: interpreter for the workload on the compute nodes.
    """

    model_config = ConfigDict(extra="allow")

    partition: str = "debug"
    account: str | None = None
    shared_dir: str
    container_image: str | None = None
    probe_paths: list[str] = Field(default_factory=list)
    omnistat: bool = False
    omnistat_dir: str | None = None
    omnistat_config_template: str | None = None
    victoria_metrics_url: str | None = None
    victoria_metrics_binary: str = "victoria-metrics"
    python: str = "python3"
    pythonpath: str | None = None
    source: str | None = Field(default=None, description="the YAML file this was read from")

    @field_validator("partition", "account")
    @classmethod
    def _slurm_word(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[A-Za-z0-9_.\-]+", v):
            raise ValueError(f"not a valid SLURM partition/account name: {v!r}")
        return v


def load_cluster_config(path: str | Path | None = None) -> ClusterConfig:
    """Read a cluster config YAML.

    ``path`` None: ``$AI4S_CLUSTER_CONFIG``, else ``./.cluster-config.yaml``, else a default for the
    local 2-node cluster (partition ``debug``, shared dir ``$AI4S_SHARED_DIR``). Raises
    :class:`InputError` for a missing or malformed file (one line naming the file and field)."""
    p = Path(path) if path else None
    if p is None and os.environ.get("AI4S_CLUSTER_CONFIG"):
        p = Path(os.environ["AI4S_CLUSTER_CONFIG"])
    if p is None:
        for name in DEFAULT_CONFIG_NAMES:
            if Path(name).is_file():
                p = Path(name)
                break
    if p is None:
        sd = os.environ.get("AI4S_SHARED_DIR")
        if not sd:
            raise InputError("no cluster config (.cluster-config.yaml or --cluster-config) and AI4S_SHARED_DIR is unset")
        return ClusterConfig(shared_dir=sd, victoria_metrics_url=os.environ.get("AI4S_TSDB_URL"))
    if not p.is_file():
        raise InputError(f"cluster config {p} does not exist")
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as e:
        raise InputError(f"cluster config {p} is not valid YAML: {str(e).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise InputError(f"cluster config {p}: expected a mapping at the top level")
    data.setdefault("shared_dir", os.environ.get("AI4S_SHARED_DIR"))
    try:
        cfg = ClusterConfig.model_validate({**data, "source": str(p)})
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(x) for x in err["loc"])
        raise InputError(f"cluster config {p}: {loc}: {err['msg']}") from None
    return cfg


@dataclass
class SacctRecord:
    """One job as sacct reports it (built by :func:`job_record` from all its rows).

    ``exit_code`` is SLURM's ``code:signal`` string ("0:0", "42:0"); ``nodelist`` is expanded to
    single names (``node[1-2]`` -> ``["node1", "node2"]``), empty while none is allocated;
    ``start``/``end`` are unix seconds or None (``Unknown``/``None``); ``elapsed_s`` is seconds.
    ``attempts``: the allocation states of earlier runs under the same id (``["PREEMPTED"]`` for a
    job preempted, requeued and run again); ``steps``: ``{step: state}`` of its steps
    (``{"batch": "OUT_OF_MEMORY"}``); ``components``: het-job components or array tasks
    aggregated into this record (empty for a plain job)."""

    jobid: str
    state: str
    exit_code: str
    nodelist: list[str] = field(default_factory=list)
    start: float | None = None
    end: float | None = None
    elapsed_s: float = 0.0
    attempts: list[str] = field(default_factory=list)
    steps: dict[str, str] = field(default_factory=dict)
    components: list[str] = field(default_factory=list)
    alloc_nodes: int = 0

    @property
    def step_problems(self) -> dict[str, str]:
        """Steps that did not complete (an OUT_OF_MEMORY step under a COMPLETED job, say)."""
        return {k: v for k, v in self.steps.items() if v.split()[0] not in ("COMPLETED", "RUNNING", "PENDING")}

    @property
    def base_state(self) -> str:
        """``CANCELLED by 0`` -> ``CANCELLED``."""
        return self.state.split()[0] if self.state else ""

    @property
    def is_terminal(self) -> bool:
        """A final state (PREEMPTED, REQUEUED, PENDING, RUNNING... are not)."""
        return self.base_state in TERMINAL_STATES

    @property
    def exit_status(self) -> int:
        """The job script's exit status (the part before ':')."""
        try:
            return int(self.exit_code.split(":")[0])
        except (ValueError, IndexError):
            return -1


class WaitTimeout(Exception):
    """``wait_for_terminal`` gave up. ``scontrol`` holds ``scontrol show job`` output (may be empty
    once the job aged out of slurmctld, MinJobAge), ``last`` the last sacct row or None."""

    def __init__(self, jobid: str, timeout_s: float, last: SacctRecord | None, scontrol: str):
        self.jobid, self.timeout_s, self.last, self.scontrol = jobid, timeout_s, last, scontrol
        state = last.state if last else "no sacct row"
        super().__init__(f"job {jobid} not terminal after {timeout_s:g}s (last sacct state: {state})")


def _require(tool: str) -> str:
    exe = shutil.which(tool)
    if exe is None:
        raise ToolUnavailableError(f"{tool} is not installed or not on PATH (SLURM client commands are needed)")
    return exe


def _run(argv: list[str], *, timeout: float = 60, env: dict[str, str] | None = None,
         check: bool = True) -> subprocess.CompletedProcess:
    _require(argv[0])
    try:
        cp = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise ToolUnavailableError(f"{argv[0]} did not answer within {timeout:g}s (is slurmctld up?)") from None
    if check and cp.returncode != 0:
        msg = (cp.stderr or cp.stdout).strip().splitlines()
        raise ToolUnavailableError(f"{' '.join(argv[:2])} failed (rc={cp.returncode}): {msg[-1] if msg else 'no output'}")
    return cp


def check_jobid(jobid: str | int) -> str:
    """``jobid`` (stripped) when it has SLURM's job id syntax (:data:`JOBID_SYNTAX`: ``123``,
    ``123_4``, ``123_[1-3]``, ``123+0``); else :class:`InputError` with one line. Called before
    any command runs, so nothing else ever sees a bad id."""
    s = str(jobid).strip()
    if not _JOBID.match(s):
        raise InputError(f"not a SLURM job id: {s[:60]!r} (expected 123, 123_4, 123_[1-3] or 123+0)")
    return s


_check_jobid = check_jobid


def _check_nodes(nodes: Iterable[str]) -> list[str]:
    out = []
    for n in nodes:
        if not _SAFE_NODE.match(n):
            raise InputError(f"not a node name: {n!r}")
        out.append(n)
    return out


def expand_hostlist(hostlist_text: str) -> list[str]:
    """``gpu[01-03,07],node1`` -> ``["gpu01", "gpu02", "gpu03", "gpu07", "node1"]`` with the PyPI
    ``python-hostlist`` parser (SLURM's hostlist syntax, no SLURM needed; it agrees with
    ``scontrol show hostnames``, tested on the local cluster). Order and zero padding are kept.
    Empty or ``None assigned`` -> []. Raises :class:`InputError` for a malformed list."""
    hl = (hostlist_text or "").strip()
    if not hl or hl.lower().startswith("none"):
        return []
    try:
        return list(hostlist.expand_hostlist(hl, sort=False))
    except hostlist.BadHostlist as e:
        raise InputError(f"not a SLURM hostlist: {hl[:80]!r} ({e})") from None


def scontrol_hostnames(hostlist_text: str) -> list[str]:
    """SLURM's own expansion (``scontrol show hostnames``); needs the SLURM client commands."""
    cp = _run(["scontrol", "show", "hostnames", hostlist_text])
    return [h for h in cp.stdout.split() if h]


def sbatch(script: Path, *, exclude: Iterable[str] = (), extra_args: Iterable[str] = (),
           env: dict[str, str] | None = None) -> str:
    """Submit ``script`` with ``sbatch --parsable`` and return the job id (``"123"``; the
    ``;cluster`` suffix of a federated answer is dropped).

    ``exclude``: node names, passed as ``--exclude=a,b`` (single nodes only, never a class: seed
    lessons 1/18). ``env``: the environment sbatch runs with (the script's ``--export=ALL`` takes it
    to the job). Raises :class:`ToolUnavailableError` when sbatch is missing or refuses the job,
    :class:`InputError` for a missing script or a bad node name."""
    script = Path(script)
    if not script.is_file():
        raise InputError(f"job script {script} does not exist")
    argv = ["sbatch", "--parsable"]
    ex = _check_nodes(exclude)
    if ex:
        argv.append("--exclude=" + ",".join(ex))
    argv += list(extra_args)
    argv.append(str(script))
    cp = _run(argv, env=env)
    return parse_parsable(cp.stdout)


def parse_parsable(stdout: str) -> str:
    """The job id from ``sbatch --parsable`` output: ``"123"`` or ``"123;cluster"`` (federation /
    multi-cluster) -> ``"123"``. Raises :class:`ToolUnavailableError` when there is none."""
    out = [ln for ln in stdout.strip().splitlines() if ln.strip()]
    jobid = out[-1].split(";")[0].strip() if out else ""
    if not _JOBID.match(jobid):
        raise ToolUnavailableError(f"sbatch --parsable gave no job id: {stdout.strip()[:120]!r}")
    return jobid


def _parse_time(s: str) -> float | None:
    s = s.strip()
    if not s or s in ("Unknown", "None"):
        return None
    try:
        return datetime.strptime(s, "%Y-%m-%dT%H:%M:%S").timestamp()
    except ValueError:
        return None


def _parse_elapsed(s: str) -> float:
    """``[D-]HH:MM:SS`` or ``MM:SS`` -> seconds."""
    s = s.strip()
    if not s:
        return 0.0
    days = 0
    if "-" in s:
        d, s = s.split("-", 1)
        days = int(d)
    parts = [float(p) for p in s.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0.0)
    h, m, sec = parts
    return days * 86400 + h * 3600 + m * 60 + sec


SACCT_FIELDS = "JobID,State,ExitCode,NodeList,Start,End,Elapsed,AllocNodes"
#: Which state names a het job or array when its parts disagree: the first present wins.
_WORST = ("NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "FAILED", "TIMEOUT", "DEADLINE", "CANCELLED", "COMPLETED")


def parse_sacct(text: str) -> list[dict[str, str]]:
    """Rows of ``sacct -P -n -D -o`` :data:`SACCT_FIELDS` output as dicts (``JobID``, ``State``,
    ...); lines with the wrong number of columns are skipped."""
    keys = SACCT_FIELDS.split(",")
    rows = []
    for line in text.splitlines():
        cols = line.split("|")
        if len(cols) == len(keys):
            rows.append({k: c.strip() for k, c in zip(keys, cols)})
    return rows


def _start_key(row: dict[str, str]) -> float:
    t = _parse_time(row["Start"])
    return t if t is not None else float("inf")


def _one(rows: list[dict[str, str]], jid: str) -> SacctRecord | None:
    """The record of one allocation id from its rows (all attempts, all steps)."""
    allocs = [r for r in rows if r["JobID"] == jid]
    if not allocs:
        return None
    allocs.sort(key=_start_key)  # stable: a requeued attempt (later start, or not started) comes last
    cur = allocs[-1]
    cur_start = _parse_time(cur["Start"])
    # steps of this attempt only (a requeued job's old batch step is CANCELLED)
    steps = {r["JobID"].split(".", 1)[1]: r["State"] for r in rows if r["JobID"].startswith(jid + ".")
             and cur_start is not None and (_parse_time(r["Start"]) or 0) >= cur_start}
    alloc = int(cur["AllocNodes"]) if cur["AllocNodes"].isdigit() else 0
    return SacctRecord(jobid=jid, state=cur["State"], exit_code=cur["ExitCode"], nodelist=expand_hostlist(cur["NodeList"]),
                       start=_parse_time(cur["Start"]), end=_parse_time(cur["End"]), elapsed_s=_parse_elapsed(cur["Elapsed"]),
                       attempts=[r["State"] for r in allocs[:-1]], steps=steps, alloc_nodes=alloc)


def job_record(rows: list[dict[str, str]], jobid: str) -> SacctRecord | None:
    """The job ``jobid`` from ALL its sacct rows (:func:`parse_sacct` of ``sacct -D`` output, not
    only ``-X``): the latest attempt of a requeued job (PREEMPTED or REQUEUED, then COMPLETED
    under the same id, gives COMPLETED with ``attempts=["PREEMPTED"]``), its steps' states, and for
    a het job (``123`` -> ``123+0``, ``123+1``) or an array (``123`` or ``123_[1-3]`` -> its tasks)
    one record over the parts: not terminal while any part is not; else the worst state
    (NODE_FAIL > OUT_OF_MEMORY > ... > COMPLETED), union of nodes, first start, last end.
    ``CANCELLED by N`` keeps its text (``base_state`` is ``CANCELLED``). None when no row matches."""
    jid = check_jobid(jobid)
    part_re = rf"{re.escape(jid)}(?:\+\d+|_\d+|_\[[^\]]*\])"
    if not any(re.fullmatch(part_re, r["JobID"]) for r in rows) or "_[" in jid:
        rec = _one(rows, jid)
        if rec is not None:
            return rec
    if "_[" in jid:
        base, rng = jid.split("_", 1)
        want = {f"{base}_{i[1:]}" for i in hostlist.expand_hostlist("x" + rng.split("%")[0])}
        ids = sorted({r["JobID"] for r in rows if r["JobID"] in want})
    else:
        # array tasks and het components; a pending array's not-yet-run tasks are one 123_[3-4] row
        ids = sorted({r["JobID"].split(".")[0] for r in rows if re.fullmatch(part_re + r"(?:\..*)?", r["JobID"])})
    parts = [p for p in (_one(rows, i) for i in ids) if p is not None]
    if not parts:
        return None
    open_ = [p for p in parts if not p.is_terminal]
    if open_:
        state = open_[0].state
    else:
        bases = {p.base_state for p in parts}
        worst = next((w for w in _WORST if w in bases), parts[0].base_state)
        state = next(p.state for p in parts if p.base_state == worst)
    nodes: list[str] = []
    for p in parts:
        nodes += [n for n in p.nodelist if n not in nodes]
    starts = [p.start for p in parts if p.start is not None]
    ends = [p.end for p in parts if p.end is not None]
    bad = next((p.exit_code for p in parts if p.exit_code not in ("0:0", "")), parts[0].exit_code)
    return SacctRecord(jobid=jid, state=state, exit_code=bad, nodelist=nodes, start=min(starts) if starts else None,
                       end=max(ends) if ends and not open_ else None, elapsed_s=max(p.elapsed_s for p in parts),
                       attempts=[a for p in parts for a in p.attempts],
                       steps={f"{p.jobid}.{k}": v for p in parts for k, v in p.steps.items()},
                       components=[p.jobid for p in parts], alloc_nodes=sum(p.alloc_nodes for p in parts))


def sacct(jobid: str | int) -> SacctRecord | None:
    """The job as sacct knows it, from ALL its rows: ``sacct -P -n -D -j ID -o`` :data:`SACCT_FIELDS`
    (``-D``: every attempt of a requeued job; no ``-X``: steps too), reduced by :func:`job_record`.

    Returns None when sacct has no row yet (right after submit, or an id SLURM never had -- the
    caller decides which by waiting). Raises :class:`InputError` for a malformed id,
    :class:`ToolUnavailableError` when sacct is missing or the accounting daemon does not answer."""
    jid = check_jobid(jobid)
    query = jid.split("_[")[0]
    cp = _run(["sacct", "-P", "-n", "-D", "-j", query, "-o", SACCT_FIELDS])
    rec = job_record(parse_sacct(cp.stdout), jid)
    if rec is not None and not rec.components and rec.alloc_nodes > len(rec.nodelist):
        # Accounting is asynchronous: right after a job ends, the allocation row can still carry
        # the batch host alone (seen here: NodeList=node1 with AllocNodes=2 for ~1 s). While
        # slurmctld still knows the job (MinJobAge), its NodeList is authoritative.
        ctl = scontrol_show_job_text(jid)
        m = re.search(r"\bNodeList=(\S+)", ctl)
        if m and m.group(1) != "(null)":
            rec.nodelist = expand_hostlist(m.group(1))
    return rec


def scontrol_show_job_text(jobid: str | int) -> str:
    """Raw ``scontrol show job ID`` output ("" when slurmctld no longer knows the job)."""
    jid = _check_jobid(jobid)
    cp = _run(["scontrol", "show", "job", jid], check=False)
    return cp.stdout if cp.returncode == 0 else ""


def scontrol_show_job(jobid: str | int) -> dict[str, str]:
    """``scontrol show job ID`` as a dict of its ``Key=Value`` pairs (``JobState``, ``NodeList``,
    ``Reason``, ``ExitCode`` ...). Raises :class:`InputError` when slurmctld does not know the id
    (never submitted, or ended more than MinJobAge=300 s ago: use :func:`sacct` then)."""
    text = scontrol_show_job_text(jobid)
    if not text.strip():
        raise InputError(f"unknown job id {jobid}: scontrol show job has no record of it")
    out: dict[str, str] = {}
    for tok in re.findall(r"(\S+?)=(.*?)(?=\s+\S+?=|\s*$)", text.replace("\n", " "), flags=re.S):
        out[tok[0]] = tok[1].strip()
    return out


def scancel(jobid: str | int) -> None:
    """Cancel a job (used by tests and by ``cluster stop``)."""
    _run(["scancel", _check_jobid(jobid)], check=False)


#: How long sacct may lag behind a job's end (local-slurm.md: 0.1-0.25 s, once more than 1 s):
#: a terminal record is accepted when it is the same this long later.
ACCOUNTING_LAG_S = 1.5


def in_queue(jobid: str | int) -> bool:
    """True while ``squeue`` still lists the job (or any task/component of it): pending, running
    or completing. An id slurmctld no longer knows (``Invalid job id``) is not in the queue."""
    jid = check_jobid(jobid).split("_[")[0]
    cp = _run(["squeue", "-h", "-j", jid, "-o", "%i"], check=False)
    return cp.returncode == 0 and bool(cp.stdout.strip())


def expected_parts(jobid: str | int) -> int:
    """How many array tasks or het-job components slurmctld knows for ``jobid`` (0 for a plain
    job, or once the job aged out of slurmctld after MinJobAge; sacct is complete by then).
    Counted from ``scontrol show job``'s ``ArrayTaskId=`` ranges and ``HetJobOffset=`` records."""
    jid = check_jobid(jobid)
    if "_" in jid or "+" in jid:
        return 0
    text = scontrol_show_job_text(jid)
    n = 0
    for v in re.findall(r"\bArrayTaskId=(\S+)", text):
        try:
            n += len(hostlist.expand_hostlist("x[" + v.split("%")[0] + "]"))
        except hostlist.BadHostlist:
            n += 1
    return n or len(re.findall(r"\bHetJobOffset=\d+", text))


def wait_for_terminal(jobid: str | int, timeout_s: float, poll_s: float = 1.0) -> SacctRecord:
    """Poll :func:`sacct` until the job is in a terminal state and return that record.

    An empty answer (no row yet) means unknown and polling goes on; PREEMPTED, REQUEUED, PENDING,
    RUNNING, ... are not terminal (all rows are read, so a requeued job's later attempt counts).
    A terminal record is accepted only once ``squeue`` no longer lists the job and two polls in a
    row ``ACCOUNTING_LAG_S`` apart agree: sacct shows an array's tasks as they are recorded (measured here: ``132_3`` alone,
    COMPLETED, while tasks 1 and 2 were still to appear). After ``timeout_s`` seconds raise
    :class:`WaitTimeout` carrying ``scontrol show job`` output (seed 000: "If the launcher times
    out waiting for sacct ... it must scontrol show job <id>")."""
    jid = check_jobid(jobid)
    deadline = time.monotonic() + max(0.0, timeout_s)
    last: SacctRecord | None = None
    seen: tuple | None = None
    while True:
        rec = sacct(jid)
        if rec is not None:
            last = rec
            key = (rec.state, tuple(rec.components), tuple(rec.nodelist))
            if rec.is_terminal and not in_queue(jid) and len(rec.components) >= expected_parts(jid):
                if key == seen:
                    return rec
                seen = key
                time.sleep(ACCOUNTING_LAG_S)
                continue
            seen = None
        if time.monotonic() >= deadline:
            raise WaitTimeout(jid, timeout_s, last, scontrol_show_job_text(jid))
        time.sleep(max(0.05, min(poll_s, deadline - time.monotonic())))


def wait_for_array(jobid: str | int, timeout_s: float, poll_s: float = 1.0) -> list[SacctRecord]:
    """Poll sacct until every task of job array ``jobid`` is terminal; return one row per task
    (``JobID`` like ``164_0``). sacct lists an array's pending tasks as one ``164_[0-3]`` row, which
    is not terminal. Raises :class:`WaitTimeout` after ``timeout_s`` seconds."""
    jid = _check_jobid(jobid)
    deadline = time.monotonic() + max(0.0, timeout_s)
    last: list[SacctRecord] = []
    while True:
        cp = _run(["sacct", "-X", "-P", "-n", "-j", jid, "-o", "JobID,State,ExitCode,NodeList,Start,End,Elapsed"])
        rows = []
        for line in cp.stdout.splitlines():
            cols = line.split("|")
            if len(cols) >= 7 and cols[0].startswith(jid + "_"):
                rows.append(SacctRecord(jobid=cols[0], state=cols[1].strip(), exit_code=cols[2].strip(),
                                        nodelist=expand_hostlist(cols[3]), start=_parse_time(cols[4]),
                                        end=_parse_time(cols[5]), elapsed_s=_parse_elapsed(cols[6])))
        if rows:
            last = rows
            if all(r.is_terminal and "[" not in r.jobid for r in rows):
                return rows
        if time.monotonic() >= deadline:
            raise WaitTimeout(jid, timeout_s, last[0] if last else None, scontrol_show_job_text(jid))
        time.sleep(max(0.05, min(poll_s, deadline - time.monotonic())))


def srun_probe(argv: list[str], cluster: ClusterConfig, *, timeout_s: float = 330,
               env: dict[str, str] | None = None, node: str | None = None) -> subprocess.CompletedProcess:
    """The verifiers' one interactive probe: ``srun -N1 --time=00:05:00 [-p P] [-A A] argv...``
    (seed 000: "verifiers may use at most one 1-node srun -N1 --time=00:05:00 interactive probe
    (partition/account from .cluster-config.yaml)"). Never more than one node. Returns the
    completed process (stdout/stderr text, returncode); raises :class:`ToolUnavailableError` when
    srun is missing or does not finish within ``timeout_s``. ``node``: run on that node (``-w``)."""
    if not argv:
        raise InputError("srun_probe: empty command")
    cmd = ["srun", "-N1", "-n1", "--time=00:05:00", f"--partition={cluster.partition}"]
    if node is not None:
        cmd.append(f"--nodelist={_check_nodes([node])[0]}")
    if cluster.account:
        cmd.append(f"--account={cluster.account}")
    cmd += [str(a) for a in argv]
    return _run(cmd, timeout=timeout_s, env=env, check=False)


def to_manifest_fields(rec: SacctRecord) -> dict[str, Any]:
    """The manifest keys a sacct row fills: state, nodes_list, start_unix, end_unix, exit_code."""
    return {"state": rec.base_state, "nodes_list": rec.nodelist, "start_unix": rec.start,
            "end_unix": rec.end, "exit_code": rec.exit_code}
