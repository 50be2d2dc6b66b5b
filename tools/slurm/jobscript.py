"""Render sbatch job scripts from typed parameters (jinja2 templates in ``sbatch/``).

Templates: ``generic`` (any PyTorch entry script), ``hydragnn`` (``gfm_mlip_all_mpnn.py``-style),
``orbit2`` (``train_edm.py`` / ``intermediate_downscaling.py``-style) and ``cpu-toy`` (our own
workload, :mod:`ai4s_graph.workloads.train`). All of them carry the seed's wrapper lessons:
per-node mount-health probe with exit 42 (lessons 1, 18, 19), Omnistat user-mode with ``@JOB_DIR@``
substituted by sed (lesson 1) and a per-job ``job_detection_file`` (lesson 2), VictoriaMetrics with
``-fs.disableMmap`` (lesson 3), profiler armed through the environment (``AI4S_PROFILE=1``; HydraGNN's
Profile block under ``NeuralNetwork``, lesson 4), cluster paths listed in ``--export`` (lesson 12),
checkpoint saving off (lesson 30), artifacts in ``$AI4S_SHARED_DIR/models/<model>/perf-runs/<jobid>/``.

Shell safety: every value that reaches the script is checked against a safe pattern and then
``shlex``-quoted where it lands in a command; a value with a shell metacharacter
(`` ; | & $ ` ( ) < > `` quotes, backslash, blanks) or a newline raises :class:`InputError` naming
the field.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any, Literal

import jinja2
from pydantic import BaseModel, Field, ValidationError

from ..errors import InputError
from ..files import import_root, package_dir
from .client import ClusterConfig
from .jobs import perf_runs_root

TEMPLATES = {"generic": "generic.sbatch.j2", "hydragnn": "hydragnn.sbatch.j2", "orbit2": "orbit2.sbatch.j2",
             "cpu-toy": "cpu-toy.sbatch.j2"}
SBATCH_DIR = package_dir("sbatch")

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
_ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
_VALUE = re.compile(r"^[A-Za-z0-9_.,:/=+@%~^\-]*$")  # no blanks, quotes, ; | & $ ` ( ) < > \ * ? ! # [ ]
_PATH = re.compile(r"^/[A-Za-z0-9_./+@~-]*$")
_TIME = re.compile(r"^(\d+-)?\d{1,3}(:\d{2}){0,2}$")
_OPT = re.compile(r"^[a-z][a-z0-9-]{0,40}$")
_META = re.compile(r"[;|&$`()<>\n\r\\'\"\s*?!#\[\]{}]")
# options the template itself sets: a user may not override them through sbatch_options
_RESERVED_OPTS = {"job-name", "nodes", "ntasks-per-node", "cpus-per-task", "time", "partition", "account",
                  "output", "export", "gpus-per-node", "wrap"}
# the environment names the template owns
_RESERVED_ENV = {"AI4S_SHARED_DIR", "AI4S_MODEL", "AI4S_PERF_RUN_DIR", "SLURM_JOB_ID", "PATH", "HOME"}


def _refuse(field: str, value: str) -> InputError:
    m = _META.search(value)
    what = repr(m.group(0)) if m else "a character outside [A-Za-z0-9_.,:/=+@%~^-]"
    return InputError(f"{field}: value {value[:60]!r} contains shell metacharacter {what}; refused")


def check_value(field: str, value: Any, pattern: re.Pattern[str] = _VALUE) -> str:
    """Return ``str(value)`` when it matches ``pattern``, else raise :class:`InputError` naming
    ``field`` and the offending character."""
    s = str(value)
    if not pattern.fullmatch(s):
        raise _refuse(field, s)
    return s


class JobSpec(BaseModel):
    """One job to submit. ``env``: the levers (NAME -> value), exported in the script and listed in
    ``--export``; ``script_args``: arguments for the workload's entry point; ``sbatch_options``:
    extra ``#SBATCH --key=value`` lines; ``exclude``: node names for ``--exclude`` (single nodes,
    seed lessons 1/18); ``profile``: arm the profiler (``AI4S_PROFILE=1``). ``ntasks_per_node``
    left unset launches one task per GPU (``gpus_per_node``; 1 on a CPU-only job)."""

    @property
    def tasks_per_node(self) -> int:
        """Tasks ``srun`` starts on each node: ``ntasks_per_node``, else one per GPU, else 1."""
        return self.ntasks_per_node or max(1, self.gpus_per_node)

    template: Literal["generic", "hydragnn", "orbit2", "cpu-toy"] = "cpu-toy"
    job_name: str = "ai4s-perf"
    model: str = "cpu-toy"
    nodes: int = Field(default=1, ge=1, le=4096)
    gpus_per_node: int = Field(default=0, ge=0, le=64)
    ntasks_per_node: int | None = Field(default=None, ge=1, le=1024,
                                        description="tasks per node; None: one per GPU (gpus_per_node), else 1")
    cpus_per_task: int = Field(default=1, ge=1, le=1024)
    time_limit: str = "00:10:00"
    env: dict[str, str] = Field(default_factory=dict)
    script_args: list[str] = Field(default_factory=list)
    sbatch_options: dict[str, str] = Field(default_factory=dict)
    profile: bool = True
    exclude: list[str] = Field(default_factory=list)


def validate_spec(spec: JobSpec, cluster: ClusterConfig) -> None:
    """Check every value of ``spec`` and ``cluster`` that reaches the shell; raise
    :class:`InputError` naming the first bad field."""
    check_value("job_name", spec.job_name, _NAME)
    check_value("model", spec.model, _NAME)
    if not _TIME.fullmatch(spec.time_limit):
        raise InputError(f"time_limit: {spec.time_limit!r} is not a SLURM time ([D-]HH:MM:SS)")
    for k, v in spec.env.items():
        if not _ENV_KEY.fullmatch(k):
            raise InputError(f"env: {k!r} is not an environment variable name")
        if k in _RESERVED_ENV:
            raise InputError(f"env.{k}: set by the job script itself; not a lever")
        check_value(f"env.{k}", v)
    for i, a in enumerate(spec.script_args):
        check_value(f"script_args[{i}]", a)
    for k, v in spec.sbatch_options.items():
        if not _OPT.fullmatch(k) or k in _RESERVED_OPTS:
            raise InputError(f"sbatch_options: {k!r} is not an allowed sbatch option name")
        check_value(f"sbatch_options.{k}", v)
    for n in spec.exclude:
        check_value("exclude", n, _NAME)
    check_value("cluster.shared_dir", cluster.shared_dir, _PATH)
    for name in ("container_image", "omnistat_dir", "omnistat_config_template", "pythonpath"):
        val = getattr(cluster, name)
        if val:
            check_value(f"cluster.{name}", val, re.compile(r"^/[A-Za-z0-9_./+@~:-]*$"))
    for i, p in enumerate(cluster.probe_paths):
        check_value(f"cluster.probe_paths[{i}]", p.replace("{node}", "NODE"), _PATH)
    if cluster.victoria_metrics_url:
        check_value("cluster.victoria_metrics_url", cluster.victoria_metrics_url)
    check_value("cluster.python", cluster.python, re.compile(r"^[A-Za-z0-9_./+-]+$"))
    check_value("cluster.victoria_metrics_binary", cluster.victoria_metrics_binary, re.compile(r"^[A-Za-z0-9_./+-]+$"))
    if spec.template == "generic" and not spec.script_args:
        raise InputError("script_args: the generic template needs the entry script as its first argument")


def _env() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(SBATCH_DIR)), undefined=jinja2.StrictUndefined,
                             keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True, autoescape=False)
    env.filters["q"] = lambda v: shlex.quote(str(v))
    return env


def perf_root(spec: JobSpec, cluster: ClusterConfig) -> Path:
    """``<shared_dir>/models/<model>/perf-runs``: the job's run dir is ``<perf_root>/<jobid>/``."""
    return perf_runs_root(cluster.shared_dir, spec.model)


def render(spec: JobSpec, cluster: ClusterConfig) -> str:
    """The job script text. Raises :class:`InputError` for any unsafe value (see module doc)."""
    try:
        spec = JobSpec.model_validate(spec.model_dump())
    except ValidationError as e:
        err = e.errors()[0]
        raise InputError(f"{'.'.join(map(str, err['loc']))}: {err['msg']}") from None
    validate_spec(spec, cluster)
    pkg_root = import_root()
    pythonpath = cluster.pythonpath or (str(pkg_root) if _PATH.fullmatch(str(pkg_root)) else "")
    tsdb = cluster.victoria_metrics_url or ""
    # lesson 12: cluster paths listed explicitly in --export; comma-free levers too (a comma
    # would split --export's list), all levers are exported in the body as well.
    export = ["ALL", f"AI4S_SHARED_DIR={cluster.shared_dir}", f"AI4S_MODEL={spec.model}"]
    if tsdb:
        export.append(f"AI4S_TSDB_URL={tsdb}")
    export += [f"{k}={v}" for k, v in spec.env.items() if "," not in v]
    ctx = {
        "spec": spec, "cluster": cluster, "tasks_per_node": spec.tasks_per_node, "perf_root": str(perf_root(spec, cluster)),
        "export": ",".join(export), "pythonpath": pythonpath, "tsdb_url": tsdb,
        "args": " ".join(shlex.quote(a) for a in spec.script_args),
        "sbatch_options": sorted(spec.sbatch_options.items()),
        "probe_paths": " ".join(cluster.probe_paths),  # validated: absolute, no blanks or metacharacters
    }
    return _env().get_template(TEMPLATES[spec.template]).render(**ctx)


def write_script(spec: JobSpec, cluster: ClusterConfig, directory: str | Path) -> Path:
    """Render and write ``<directory>/<job_name>.<template>.sbatch`` (mode 0755); also create the
    perf-runs directory so SLURM can open ``--output`` there. Returns the script path."""
    text = render(spec, cluster)
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    perf_root(spec, cluster).mkdir(parents=True, exist_ok=True)
    p = d / f"{spec.job_name}.{spec.template}.sbatch"
    p.write_text(text)
    p.chmod(0o755)
    return p
