"""Running SLURM's query commands (``sacct``, ``squeue``, ``scontrol``) and reading their answers.

**One parser.** Every query asks for an explicit field list, printed with ``-P``/``-h`` and the
unit separator ``\\x1f`` between fields (``sacct --delimiter``, ``squeue -o``), free text (the
job name) last, and times as unix seconds (``SLURM_TIME_FORMAT=%s``, sacct(1)/squeue(1)
"PERFORMANCE/ENVIRONMENT VARIABLES"); :func:`parse_rows` reads them all. A name holding a ``|``
or a blank, or a ``Comment=a b=c`` value, cannot shift a column.

Why not ``--json``: on the SLURM installed here (Debian's slurm-wlm 22.05.8) ``sacct --json``
reports every job that exited normally as ``exit_code: {status: SUCCESS, return_code: 0}`` --
measured: a job that ran ``exit 42`` reads ``42:0`` in ``sacct -P`` and ``return_code 0`` in
``--json`` (SchedMD/slurm ``src/plugins/openapi/dbv0.0.38/parse.c``, ``_dump_job_exit_code``:
``WIFEXITED`` -> ``return_code = 0``), which would hide the mount-health probe's exit 42;
``squeue --json`` ignores ``-j`` and dumps the whole job table on every poll (squeue(1) 22.05:
"all other formatting and filtering arguments will be ignored"); ``scontrol --json`` does not
exist before 23.02 (``scontrol: unrecognized option '--json'`` here).

**Transient failures.** A query that fails with an error that may clear by itself -- slurmdbd or
slurmctld unreachable for a moment, ``Socket timed out on send/recv operation``, a database lock
timeout, a command that does not answer in time -- is retried with exponential backoff
(tenacity) for as long as :class:`RetryPolicy` ``outage_s`` allows; every retry is counted in a
:class:`RetryLog` so the caller can say "retried sacct k times". Only a failure that lasts past
``outage_s`` ends the caller's work (:class:`~ai4s_graph.tools.errors.ToolUnavailableError`). An
answer that will not change (an unknown option, a bad argument) is not retried. ``sbatch`` is
never retried here: a submission that timed out may have been accepted
(:mod:`~ai4s_graph.tools.slurm.submission` reconciles by job name instead).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence, TypeVar

from tenacity import Retrying, retry_if_exception_type, retry_if_result, stop_after_delay, wait_exponential

from ..errors import ToolUnavailableError

T = TypeVar("T")

#: Field separator of every query: ASCII unit separator, which no SLURM name or state contains.
FIELD_SEP = "\x1f"
#: Times as unix seconds in sacct/squeue output (strftime ``%s``); unset times print as
#: ``Unknown``/``None``/``N/A``.
QUERY_ENV = {"SLURM_TIME_FORMAT": "%s"}

#: Answers that will not change on a retry: the command line itself is wrong (measured here:
#: ``scontrol: unrecognized option '--json'``), or the id does not exist
#: (``slurm_load_jobs error: Invalid job id specified``).
_PERMANENT = re.compile(r"unrecognized option|invalid option|Invalid job id|invalid user|Unknown (?:field|option)|"
                        r"not a valid|usage:", re.I)


class TransientSlurmError(ToolUnavailableError):
    """A SLURM query failed in a way that may clear by itself (see the module doc); ``command``
    is the program (``sacct``), ``line`` its last error line."""

    def __init__(self, command: str, line: str, process: subprocess.CompletedProcess | None = None):
        self.command, self.line, self.process = command, " ".join(line.split()), process
        super().__init__(f"{command} failed: {self.line}")


@dataclass(frozen=True)
class RetryPolicy:
    """How long a transient failure may last: ``outage_s`` seconds from the first failed try
    (then the failure counts as persistent); backoff ``first_wait_s`` doubling up to
    ``max_wait_s`` between tries."""

    outage_s: float
    first_wait_s: float = 0.5
    max_wait_s: float = 8.0


#: A one-off query outside a wait (the launcher adopting a run, the telemetry verifier's window):
#: three tries over ~1.5 s, so a machine with SLURM's clients but no reachable daemons is not
#: held up (a policy, not a rule: it decides no verdict).
ONE_SHOT = RetryPolicy(outage_s=1.5)
#: Inside a wait for a submitted job: slurm.conf(5) SlurmctldTimeout, "the interval ... that the
#: backup controller waits for the primary controller to respond before assuming control. The
#: default value is 120 seconds" -- an outage SLURM itself rides out without a failover.
IN_WAIT = RetryPolicy(outage_s=120.0)


@dataclass
class RetryLog:
    """Transient failures met and retried: ``retries`` maps a command to how many of its tries
    failed and were retried; ``last_error`` keeps its last error line."""

    retries: dict[str, int] = field(default_factory=dict)
    last_error: dict[str, str] = field(default_factory=dict)

    def note(self, command: str, line: str) -> None:
        self.retries[command] = self.retries.get(command, 0) + 1
        self.last_error[command] = line

    @property
    def total(self) -> int:
        return sum(self.retries.values())

    def summary(self) -> str:
        """``"retried sacct 2 times, squeue once (last sacct error: ...)"``, or ``""`` when nothing
        was retried."""
        if not self.retries:
            return ""
        parts = [f"{c} {'once' if n == 1 else f'{n} times'}" for c, n in sorted(self.retries.items())]
        cmd = max(self.retries, key=lambda c: self.retries[c])
        return f"retried {', '.join(parts)} (last {cmd} error: {self.last_error[cmd][:160]})"


def require(tool: str) -> str:
    """The path of ``tool`` on PATH, else :class:`ToolUnavailableError` (not transient)."""
    exe = shutil.which(tool)
    if exe is None:
        raise ToolUnavailableError(f"{tool} is not installed or not on PATH (SLURM client commands are needed)")
    return exe


def run_once(argv: Sequence[str], *, timeout: float = 60, env: dict[str, str] | None = None,
             extra_env: dict[str, str] = QUERY_ENV, empty_on: re.Pattern[str] | None = None) -> subprocess.CompletedProcess:
    """Run one SLURM client command (argv, never a shell) with ``env`` (default: this process's)
    plus ``extra_env`` (default :data:`QUERY_ENV`).

    Returns the completed process when it exits 0, or -- with stdout emptied -- when it fails
    with an error matching ``empty_on`` (an answer meaning "none": ``Invalid job id`` from squeue).
    Raises :class:`ToolUnavailableError` when the program is missing or its answer is final (a
    :data:`_PERMANENT` error), and :class:`TransientSlurmError` (holding the process) for any
    other non-zero exit, a death by signal, or no answer within ``timeout`` seconds."""
    argv = [str(a) for a in argv]
    require(argv[0])
    run_env = {**(env if env is not None else os.environ), **extra_env}
    try:
        cp = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=run_env)
    except subprocess.TimeoutExpired:
        raise TransientSlurmError(argv[0], f"no answer within {timeout:g}s") from None
    if cp.returncode == 0:
        return cp
    text = cp.stderr or cp.stdout or ""
    if empty_on is not None and empty_on.search(text):
        return subprocess.CompletedProcess(cp.args, cp.returncode, "", cp.stderr)
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    line = lines[-1] if lines else f"exit status {cp.returncode}, no output"
    if cp.returncode > 0 and _PERMANENT.search(text):
        raise ToolUnavailableError(f"{' '.join(argv[:2])} failed (rc={cp.returncode}): {line}")
    raise TransientSlurmError(argv[0], f"{line} (rc={cp.returncode})", cp)


def run_query(argv: Sequence[str], *, policy: RetryPolicy = ONE_SHOT, log: RetryLog | None = None,
              deadline: float | None = None, timeout: float = 60, env: dict[str, str] | None = None,
              empty_on: re.Pattern[str] | None = None) -> subprocess.CompletedProcess:
    """:func:`run_once`, retried on :class:`TransientSlurmError` with exponential backoff
    (``policy``) until it succeeds, ``policy.outage_s`` seconds pass since the first try, or the
    monotonic ``deadline`` (the caller's own bound) is reached; each retry is noted in ``log``.

    Raises :class:`ToolUnavailableError` naming the command, how long it kept failing and its
    last error once ``outage_s`` is spent (a persistent failure); the last
    :class:`TransientSlurmError` when ``deadline`` came first (the caller decides); a final answer
    at once."""
    t0 = time.monotonic()

    def past_deadline(_rs) -> bool:
        return deadline is not None and time.monotonic() >= deadline

    def before_sleep(rs) -> None:
        err = rs.outcome.exception()
        if log is not None and isinstance(err, TransientSlurmError):
            log.note(err.command, err.line)

    retrying = Retrying(retry=retry_if_exception_type(TransientSlurmError),
                        stop=stop_after_delay(policy.outage_s) | past_deadline,
                        wait=wait_exponential(multiplier=policy.first_wait_s, max=policy.max_wait_s),
                        before_sleep=before_sleep, reraise=True)
    try:
        return retrying(run_once, argv, timeout=timeout, env=env, empty_on=empty_on)
    except TransientSlurmError as e:
        spent = time.monotonic() - t0
        if deadline is not None and time.monotonic() >= deadline and spent < policy.outage_s:
            raise
        n = retrying.statistics.get("attempt_number", 1)
        raise ToolUnavailableError(f"{e.command} kept failing for {spent:.0f}s over {n} tries (not a transient "
                                   f"outage): {e.line}") from None


def parse_rows(text: str, fields: Sequence[str]) -> list[dict[str, str]]:
    """Rows of a query's output (one line per row, :data:`FIELD_SEP` between fields, ``fields``
    in order) as dicts ``{field: value}`` with surrounding blanks stripped. The last field keeps
    any separator it holds (the line is split ``len(fields) - 1`` times), so put free text last;
    lines with too few fields are skipped."""
    n = len(fields)
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        cols = line.split(FIELD_SEP, n - 1)
        if len(cols) == n:
            rows.append({k: c.strip() for k, c in zip(fields, cols)})
    return rows


def unix_time(value: str) -> float | None:
    """A time field printed under ``SLURM_TIME_FORMAT=%s`` -> unix seconds; ``Unknown``,
    ``None``, ``N/A`` or empty (not started, not ended) -> None."""
    v = (value or "").strip()
    return float(v) if re.fullmatch(r"\d+(?:\.\d+)?", v) else None


def poll(step: Callable[[], T | None], timeout_s: float, interval: float | Callable[[], float]) -> T | None:
    """Call ``step()`` until it returns something other than None, waiting ``interval`` seconds
    (a number, or a function giving the next wait) between calls, for at most ``timeout_s``
    seconds (tenacity). Returns that value, or None when the time ran out; ``step`` runs at least
    once and its exceptions propagate. The wait is cut to the time left, so the bound holds."""
    deadline = time.monotonic() + max(0.0, timeout_s)

    def wait(_rs) -> float:
        iv = interval() if callable(interval) else interval
        return max(0.0, min(float(iv), deadline - time.monotonic()))

    retrying = Retrying(retry=retry_if_result(lambda v: v is None), wait=wait,
                        stop=lambda _rs: time.monotonic() >= deadline, retry_error_callback=lambda _rs: None)
    return retrying(step)


_JOB_STATE = re.compile(r"\bJobState=([A-Z_]+)")


def scontrol_state(text: str | None) -> str | None:
    """The ``JobState=`` of ``scontrol show job`` output (``"PENDING"``, ``"RUNNING"``...), or None
    when the text holds none. slurmctld answers scontrol from its own memory, while sacct's row
    comes through slurmdbd asynchronously (seconds later on a loaded machine), so this is the job's
    state when sacct has no row yet."""
    m = _JOB_STATE.search(text or "")
    return m.group(1) if m else None
