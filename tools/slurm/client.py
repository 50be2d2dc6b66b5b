"""Typed wrappers over the SLURM client commands: ``sbatch``, ``sacct``, ``squeue``, ``scontrol``,
``srun``.

Everything runs the real commands (no REST API, no mocks). Accounting is asynchronous: a job that
has just left ``squeue`` may take 0.1-1 s to show its final state in ``sacct``, and right after
``sbatch`` sacct may have no row at all -- so the waiting is a poll, never a single read
(/work/shared/notes/local-slurm.md, pitfall 9). PREEMPTED and REQUEUED are not terminal: the job
comes back (seed 000, "When something goes wrong").

Queries go through :mod:`.query` (one delimited-text parser for sacct and squeue; transient
failures retried with backoff and counted); ids through :mod:`.ids` (one validator; array tasks
and het components are matched by ``JobID`` and by ``JobIDRaw``).

The cluster config (``.cluster-config.yaml``) gives partition, account and the shared directory;
see ``sbatch/cluster-config.example.yaml``.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import hostlist
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ...state.manifest import TERMINAL_STATES
from ..errors import InputError, ToolUnavailableError
from .ids import JOBID_SYNTAX, base_id, check_jobid, id_forms, query_id
from .query import (FIELD_SEP, IN_WAIT, ONE_SHOT, RetryLog, RetryPolicy, TransientSlurmError, parse_rows, poll,
                    run_once, run_query, unix_time)

__all__ = [
    "ClusterConfig", "JOBID_SYNTAX", "RetryLog", "SacctRecord", "TERMINAL_STATES", "TransientSlurmError", "WaitTimeout",
    "check_jobid", "expand_hostlist", "find_jobs_by_name", "job_record", "load_cluster_config", "parse_parsable",
    "parse_sacct", "queue_job", "sacct", "sbatch", "scancel", "srun_probe", "wait_for_terminal",
]

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

    ``jobid`` is the id asked for (``123``, ``123_4``, a raw id ``127``, ``123+1``); ``display_id``
    the JobID sacct shows for it (``123_4`` when asked for its raw id ``127``); ``raw_ids`` the
    ``JobIDRaw`` of every allocation in the record. ``exit_code`` is SLURM's ``code:signal``
    string ("0:0", "42:0"); ``nodelist`` is expanded to single names (``node[1-2]`` -> ``["node1",
    "node2"]``), empty while none is allocated; ``start``/``end`` are unix seconds or None (not
    started, not ended); ``elapsed_s`` is seconds (``ElapsedRaw``). ``attempts``: the allocation
    states of earlier runs under the same id (``["PREEMPTED"]`` for a job preempted, requeued and
    run again); ``steps``: ``{step: state}`` of its steps (``{"batch": "OUT_OF_MEMORY"}``);
    ``components``: het-job components or array tasks aggregated into this record (empty for a
    plain job or one task); ``name``: the job name."""

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
    display_id: str = ""
    raw_ids: list[str] = field(default_factory=list)
    name: str = ""

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

    @property
    def id_forms(self) -> list[str]:
        """Every id that names this job or a part of it (:func:`.ids.id_forms`): the id asked for,
        the JobIDs of its tasks/components, their raw ids -- what ``rmsjob_info{jobid}`` may carry."""
        shown = self.components or ([self.display_id] if self.display_id else [])
        return id_forms(self.jobid, self.raw_ids, shown)


class WaitTimeout(Exception):
    """``wait_for_terminal`` gave up. ``scontrol`` holds ``scontrol show job`` output (may be empty
    once the job aged out of slurmctld, MinJobAge), ``last`` the last sacct row or None,
    ``retries`` the transient failures met on the way (:class:`RetryLog`)."""

    def __init__(self, jobid: str, timeout_s: float, last: SacctRecord | None, scontrol: str,
                 retries: RetryLog | None = None):
        self.jobid, self.timeout_s, self.last, self.scontrol = jobid, timeout_s, last, scontrol
        self.retries = retries or RetryLog()
        state = last.state if last else "no sacct row"
        note = f"; {self.retries.summary()}" if self.retries.total else ""
        super().__init__(f"job {jobid} not terminal after {timeout_s:g}s (last sacct state: {state}){note}")


def _run(argv: list[str], *, timeout: float = 60, env: dict[str, str] | None = None,
         check: bool = True) -> subprocess.CompletedProcess:
    """A command that is not a query (sbatch, scancel, srun, scontrol show hostnames): run once,
    never retried. ``check``: raise on a non-zero exit (:class:`TransientSlurmError` unless the
    answer is final, see :func:`.query.run_once`); else return the completed process."""
    try:
        return run_once(argv, timeout=timeout, env=env, extra_env={})
    except TransientSlurmError as e:
        if check or e.process is None:
            raise
        return e.process


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
    if not hl or hl.lower().startswith("none") or hl in ("(null)", "N/A"):
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
    ``;cluster`` suffix of a federated answer is dropped). Never retried: a submission that
    failed or timed out may still have been accepted (``run --submit`` reconciles by job name,
    :mod:`.submission`).

    ``exclude``: node names, passed as ``--exclude=a,b`` (single nodes only, never a class: seed
    lessons 1/18). ``env``: the environment sbatch runs with (the script's ``--export=ALL`` takes it
    to the job). Raises :class:`ToolUnavailableError` when sbatch is missing or refuses the job
    (:class:`TransientSlurmError` when the refusal may clear: slurmctld unreachable, a timeout),
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
    try:
        return check_jobid(jobid)
    except InputError:
        raise ToolUnavailableError(f"sbatch --parsable gave no job id: {stdout.strip()[:120]!r}") from None


#: The sacct fields every query asks for, free text (the name) last (:func:`.query.parse_rows`).
SACCT_FIELDS = ("JobID", "JobIDRaw", "State", "ExitCode", "NodeList", "Start", "End", "ElapsedRaw", "AllocNodes",
                "JobName")
#: squeue's format codes (squeue(1) ``-o``) under the same field names as sacct's.
SQUEUE_FIELDS = {"JobID": "%i", "JobIDRaw": "%A", "State": "%T", "NodeList": "%N", "NumNodes": "%D", "JobName": "%j"}
#: Which state names a het job or array when its parts disagree: the first present wins.
_WORST = ("NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "FAILED", "TIMEOUT", "DEADLINE", "CANCELLED", "COMPLETED")


def parse_sacct(text: str) -> list[dict[str, str]]:
    """Rows of ``sacct -P -n --delimiter=\\x1f -o`` :data:`SACCT_FIELDS` output as dicts
    (``JobID``, ``JobIDRaw``, ``State``, ...); lines with too few columns are skipped."""
    return parse_rows(text, SACCT_FIELDS)


def _sacct_argv(query: str, *extra: str) -> list[str]:
    return ["sacct", "-P", "-n", f"--delimiter={FIELD_SEP}", *extra, "-j", query, "-o", ",".join(SACCT_FIELDS)]


def _start_key(row: dict[str, str]) -> float:
    t = unix_time(row["Start"])
    return t if t is not None else float("inf")


def _is_alloc(row: dict[str, str]) -> bool:
    return "." not in row["JobID"]


def _one(rows: list[dict[str, str]], jid: str) -> SacctRecord | None:
    """The record of one allocation from its rows (all attempts, all steps): the rows whose JobID
    is ``jid``, else those whose JobIDRaw is (an array task or het component asked for by its raw
    id)."""
    allocs = [r for r in rows if _is_alloc(r) and r["JobID"] == jid] or \
        [r for r in rows if _is_alloc(r) and r["JobIDRaw"] == jid]
    if not allocs:
        return None
    allocs.sort(key=_start_key)  # stable: a requeued attempt (later start, or not started) comes last
    cur = allocs[-1]
    shown = cur["JobID"]
    cur_start = unix_time(cur["Start"])
    # steps of this attempt only (a requeued job's old batch step is CANCELLED)
    steps = {r["JobID"].split(".", 1)[1]: r["State"] for r in rows if r["JobID"].startswith(shown + ".")
             and cur_start is not None and (unix_time(r["Start"]) or 0) >= cur_start}
    alloc = int(cur["AllocNodes"]) if cur["AllocNodes"].isdigit() else 0
    elapsed = float(cur["ElapsedRaw"]) if cur["ElapsedRaw"].isdigit() else 0.0
    return SacctRecord(jobid=jid, state=cur["State"], exit_code=cur["ExitCode"], nodelist=expand_hostlist(cur["NodeList"]),
                       start=cur_start, end=unix_time(cur["End"]), elapsed_s=elapsed,
                       attempts=[r["State"] for r in allocs[:-1]], steps=steps, alloc_nodes=alloc, display_id=shown,
                       raw_ids=_by_number({r["JobIDRaw"] for r in allocs if r["JobIDRaw"]}), name=cur["JobName"])


def _by_number(ids: Iterable[str]) -> list[str]:
    """Raw ids sorted as numbers (``99`` before ``100``)."""
    return sorted(ids, key=lambda v: (len(v), v))


def _part_re(jid: str) -> str:
    return rf"{re.escape(jid)}(?:\+\d+|_\d+|_\[[^\]]*\])"


def job_record(rows: list[dict[str, str]], jobid: str) -> SacctRecord | None:
    """The job ``jobid`` from ALL its sacct rows (:func:`parse_sacct` of ``sacct -D`` output, not
    only ``-X``): the latest attempt of a requeued job (PREEMPTED or REQUEUED, then COMPLETED
    under the same id, gives COMPLETED with ``attempts=["PREEMPTED"]``), its steps' states, and for
    a het job (``123`` -> ``123+0``, ``123+1``) or an array (``123`` or ``123_[1-3]`` -> its tasks)
    one record over the parts: not terminal while any part is not; else the worst state
    (NODE_FAIL > OUT_OF_MEMORY > ... > COMPLETED), union of nodes, first start, last end. An id
    that is no row's JobID is matched against JobIDRaw: ``127`` finds array task ``123_4`` whose
    raw id it is, ``124`` finds het component ``123+1`` (snakemake PR#2036: asked for by its raw
    id, a task was otherwise never found). ``CANCELLED by N`` keeps its text (``base_state`` is
    ``CANCELLED``). None when no row matches."""
    jid = check_jobid(jobid)
    allocs = {r["JobID"] for r in rows if _is_alloc(r)}
    if "_[" in jid:
        base, rng = jid.split("_", 1)
        want = {f"{base}_{i[1:]}" for i in hostlist.expand_hostlist("x" + rng.split("%")[0])}
        ids = sorted(allocs & want)
    else:
        # array tasks and het components; a pending array's not-yet-run tasks are one 123_[3-4] row
        ids = sorted(a for a in allocs if re.fullmatch(_part_re(jid), a))
        if not ids:
            return _one(rows, jid)
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
                       steps={f"{p.display_id}.{k}": v for p in parts for k, v in p.steps.items()},
                       components=[p.display_id for p in parts], alloc_nodes=sum(p.alloc_nodes for p in parts),
                       display_id=jid, raw_ids=_by_number({r for p in parts for r in p.raw_ids}), name=parts[0].name)


def sacct(jobid: str | int, *, policy: RetryPolicy = ONE_SHOT, log: RetryLog | None = None,
          deadline: float | None = None) -> SacctRecord | None:
    """The job as sacct knows it, from ALL its rows: ``sacct -P -n -D -j ID -o`` :data:`SACCT_FIELDS`
    (``-D``: every attempt of a requeued job; no ``-X``: steps too), reduced by :func:`job_record`.

    Returns None when sacct has no row yet (right after submit, or an id SLURM never had -- the
    caller decides which by waiting). A transient failure is retried under ``policy`` and noted in
    ``log`` (:func:`.query.run_query`). Raises :class:`InputError` for a malformed id,
    :class:`ToolUnavailableError` when sacct is missing or keeps failing past ``policy.outage_s``,
    :class:`TransientSlurmError` when ``deadline`` (monotonic) comes during an outage."""
    jid = check_jobid(jobid)
    cp = run_query(_sacct_argv(query_id(jid), "-D"), policy=policy, log=log, deadline=deadline)
    rec = job_record(parse_sacct(cp.stdout), jid)
    if rec is not None and not rec.components and rec.alloc_nodes > len(rec.nodelist):
        # Accounting is asynchronous: right after a job ends, the allocation row can still carry
        # the batch host alone (seen here: NodeList=node1 with AllocNodes=2 for ~1 s). While
        # slurmctld still knows the job (MinJobAge), its NodeList is authoritative.
        row = queue_job(jid, all_states=True, policy=policy, log=log, deadline=deadline)
        if row is not None and expand_hostlist(row["NodeList"]):
            rec.nodelist = expand_hostlist(row["NodeList"])
    return rec


_NO_SUCH_JOB = re.compile(r"Invalid job id", re.I)


def queue_rows(jobid: str | int, *, all_states: bool = False, policy: RetryPolicy = ONE_SHOT,
               log: RetryLog | None = None, deadline: float | None = None) -> list[dict[str, str]]:
    """What slurmctld knows of ``jobid`` now: ``squeue -h -j ID -o`` :data:`SQUEUE_FIELDS`, one dict
    per job, task or component (``JobID`` ``123_4``/``123+1``, ``JobIDRaw``, ``State``,
    ``NodeList``, ``NumNodes``, ``JobName``). Without ``all_states``: pending, running and
    completing jobs only (squeue's default); with it, also jobs that ended less than MinJobAge
    ago. An id slurmctld does not know (``Invalid job id specified``) gives []. Retries as
    :func:`sacct`."""
    jid = check_jobid(jobid)
    argv = ["squeue", "-h", "-j", query_id(jid), "-o", FIELD_SEP.join(SQUEUE_FIELDS.values())]
    if all_states:
        argv.append("--states=all")
    cp = run_query(argv, policy=policy, log=log, deadline=deadline, empty_on=_NO_SUCH_JOB)
    return parse_rows(cp.stdout, tuple(SQUEUE_FIELDS))


def queue_job(jobid: str | int, *, all_states: bool = True, **kw: Any) -> dict[str, str] | None:
    """The squeue row of ``jobid`` itself (JobID or JobIDRaw equal to it), or None when slurmctld
    does not know it (never submitted, or ended more than MinJobAge=300 s ago: use :func:`sacct`
    then). Replaces a regex over ``scontrol show job``, which broke on values holding blanks
    (``JobName=name with space``, ``Comment=hello world x=y``)."""
    jid = check_jobid(jobid)
    rows = queue_rows(jid, all_states=all_states, **kw)
    return next((r for r in rows if r["JobID"] == jid), None) or next((r for r in rows if r["JobIDRaw"] == jid), None)


def scontrol_show_job_text(jobid: str | int, *, policy: RetryPolicy = ONE_SHOT, log: RetryLog | None = None) -> str:
    """Raw ``scontrol show job ID`` output, kept for the user (``scontrol_show_job.txt``; seed 000:
    "If the launcher times out waiting for sacct ... it must scontrol show job <id>"); a transient
    failure is retried as :func:`sacct`'s; "" when slurmctld no longer knows the job or does not
    answer. Never parsed (values hold blanks: :func:`queue_job` reads slurmctld's record)."""
    jid = _check_jobid(jobid)
    try:
        cp = run_query(["scontrol", "show", "job", jid], policy=policy, log=log, empty_on=_NO_SUCH_JOB)
    except ToolUnavailableError:
        return ""
    return cp.stdout


def scancel(jobid: str | int) -> None:
    """Cancel a job (used by tests and by ``cluster stop``)."""
    _run(["scancel", _check_jobid(jobid)], check=False)


def find_jobs_by_name(name: str, *, since: float | None = None, policy: RetryPolicy = ONE_SHOT,
                      log: RetryLog | None = None) -> list[str]:
    """The JobIDs of this user's jobs called ``name`` (exact), lowest first: ``squeue --me -n
    --states=all`` (slurmctld knows a job from the moment sbatch is accepted until MinJobAge after
    it ended) plus ``sacct -X --name`` from ``since`` (unix seconds; default the last 7 days), which
    keeps a job after it left slurmctld. Both are needed: sacct records a new job's name as
    ``allocation`` at first -- measured here, for ~0.7 s after submission, past the job's own end
    for a 1-second job (slurmdbd's ``as_mysql_job.c`` stores ``allocation`` for a job start without
    a name) -- while squeue has the real name at once. Array tasks and het components are listed
    as their job (``123``). Raises :class:`ToolUnavailableError` when either command keeps
    failing, so "not found" always means SLURM answered and has no such job."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", name or ""):
        raise InputError(f"not a job name to look up: {str(name)[:60]!r}")
    sq = run_query(["squeue", "-h", "--me", "--states=all", "-n", name, "-o",
                    FIELD_SEP.join(SQUEUE_FIELDS.values())], policy=policy, log=log)
    start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since)) if since else "now-7days"
    sa = run_query(["sacct", "-X", "-P", "-n", f"--delimiter={FIELD_SEP}", "-S", start, f"--name={name}",
                    "-o", ",".join(SACCT_FIELDS)], policy=policy, log=log)
    rows = parse_rows(sq.stdout, tuple(SQUEUE_FIELDS)) + parse_sacct(sa.stdout)
    ids = {base_id(r["JobID"]) for r in rows if r["JobName"] == name and base_id(r["JobID"])}
    return sorted(ids, key=int)


#: How long sacct may lag behind a job's end (local-slurm.md: 0.1-0.25 s, once more than 1 s):
#: a terminal record is accepted when it is the same this long later.
ACCOUNTING_LAG_S = 1.5


def in_queue(jobid: str | int, **kw: Any) -> bool:
    """True while ``squeue`` still lists the job (or any task/component of it): pending, running
    or completing. An id slurmctld no longer knows (``Invalid job id``) is not in the queue."""
    return bool(queue_rows(jobid, **kw))


def expected_parts(jobid: str | int, **kw: Any) -> int:
    """How many array tasks or het-job components slurmctld knows for ``jobid`` (0 for a plain
    job, a single task or component, or once the job aged out of slurmctld after MinJobAge; sacct
    is complete by then), counted from ``squeue --states=all`` rows ``123_4`` / ``123+1`` (a
    pending set ``123_[3-4]`` counts its tasks)."""
    jid = check_jobid(jobid)
    if "_" in jid or "+" in jid:
        return 0
    n = 0
    for r in queue_rows(jid, all_states=True, **kw):
        if not re.fullmatch(_part_re(jid), r["JobID"]):
            continue
        m = re.fullmatch(r"\d+_\[([^\]]*)\]", r["JobID"])
        try:
            n += len(hostlist.expand_hostlist("x[" + m.group(1).split("%")[0] + "]")) if m else 1
        except hostlist.BadHostlist:
            n += 1
    return n


def wait_for_terminal(jobid: str | int, timeout_s: float, poll_s: float = 1.0, *, log: RetryLog | None = None,
                      policy: RetryPolicy = IN_WAIT) -> SacctRecord:
    """Poll :func:`sacct` (tenacity, :func:`.query.poll`) until the job is in a terminal state and
    return that record.

    An empty answer (no row yet) means unknown and polling goes on; PREEMPTED, REQUEUED, PENDING,
    RUNNING, ... are not terminal (all rows are read, so a requeued job's later attempt counts).
    A terminal record is accepted only once ``squeue`` no longer lists the job and two polls in a
    row ``ACCOUNTING_LAG_S`` apart agree: sacct shows an array's tasks as they are recorded
    (measured here: ``132_3`` alone, COMPLETED, while tasks 1 and 2 were still to appear).

    A sacct/squeue failure that may clear by itself (slurmdbd or slurmctld down for a moment, a
    socket timeout; Omnistat PR#142) is retried with backoff and counted in ``log`` (the caller
    reports "retried sacct k times"); only one lasting past ``policy.outage_s`` ends the wait,
    with :class:`ToolUnavailableError`. After ``timeout_s`` seconds raise :class:`WaitTimeout`
    carrying ``scontrol show job`` output (seed 000: "If the launcher times out waiting for sacct
    ... it must scontrol show job <id>")."""
    jid = check_jobid(jobid)
    log = RetryLog() if log is None else log
    deadline = time.monotonic() + max(0.0, timeout_s)
    box: dict[str, Any] = {"last": None, "seen": None, "confirming": False}
    kw = {"policy": policy, "log": log, "deadline": deadline}

    def step() -> SacctRecord | None:
        box["confirming"] = False
        try:
            rec = sacct(jid, **kw)
            if rec is None:
                return None
            box["last"] = rec
            key = (rec.state, tuple(rec.components), tuple(rec.nodelist))
            if rec.is_terminal and not in_queue(jid, **kw) and len(rec.components) >= expected_parts(jid, **kw):
                if key == box["seen"]:
                    return rec
                box["seen"], box["confirming"] = key, True
                return None
            box["seen"] = None
        except TransientSlurmError:  # the wait's own deadline came during an outage
            pass
        return None

    rec = poll(step, timeout_s, lambda: ACCOUNTING_LAG_S if box["confirming"] else max(0.05, poll_s))
    if rec is None:
        raise WaitTimeout(jid, timeout_s, box["last"], scontrol_show_job_text(jid), retries=log)
    return rec


def wait_for_array(jobid: str | int, timeout_s: float, poll_s: float = 1.0, *, log: RetryLog | None = None,
                   policy: RetryPolicy = IN_WAIT) -> list[SacctRecord]:
    """Poll sacct until every task of job array ``jobid`` is terminal; return one record per task
    (``jobid`` like ``164_0``). sacct lists an array's pending tasks as one ``164_[0-3]`` row, which
    is not terminal. Transient failures as :func:`wait_for_terminal`. Raises :class:`WaitTimeout`
    after ``timeout_s`` seconds."""
    jid = _check_jobid(jobid)
    log = RetryLog() if log is None else log
    deadline = time.monotonic() + max(0.0, timeout_s)
    box: dict[str, Any] = {"last": []}

    def step() -> list[SacctRecord] | None:
        try:
            cp = run_query(_sacct_argv(query_id(jid), "-X"), policy=policy, log=log, deadline=deadline)
        except TransientSlurmError:
            return None
        rows = parse_sacct(cp.stdout)
        tasks = [t for t in (_one(rows, r["JobID"]) for r in rows if r["JobID"].startswith(jid + "_")) if t]
        if tasks:
            box["last"] = tasks
            if all(t.is_terminal and "[" not in t.jobid for t in tasks):
                return tasks
        return None

    tasks = poll(step, timeout_s, max(0.05, poll_s))
    if tasks is None:
        last = box["last"]
        raise WaitTimeout(jid, timeout_s, last[0] if last else None, scontrol_show_job_text(jid), retries=log)
    return tasks


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
