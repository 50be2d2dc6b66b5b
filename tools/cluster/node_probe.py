"""Node health probe: the 30-second check seed 000 lesson 19 asks for at job start.

Lesson 19: in two weeks three different per-node faults (a container bind-mount returning EIO, a
PMIx/NCCL ring timeout, dual-NUMA host memory bandwidth degradation) each surfaced as a confusing
application failure hours into a job; a prologue running a mount-write probe, STREAM on each NUMA
domain and across them, a single-node NCCL all-reduce and a GPU launch-latency test would have
caught all three at job start. Lesson 18: judge a node against the nodes probed with it, never
against a "node class".

Checks (one row each in ``node_health_probe.txt``, format in :mod:`ai4s_graph.tools.slurm.health`):

- ``mount:<label>``: write, read back and remove a small file in home, the shared directory and
  the container image directory;
- ``stream:<domain>``: STREAM copy/scale/add/triad host memory bandwidth (GB/s = 10^9 B/s, STREAM's
  own byte counting) per NUMA domain (``numactl --cpunodebind=N --membind=N``) and across all
  domains (``--interleave=all``); in-process when numactl is absent or there is one domain;
- ``gpu<i>:launch_latency``, ``gpu<i>:d2d_copy``, ``allreduce``: from
  :mod:`ai4s_graph.tools.cluster.gpu_bench` (torch).

- ``roce_gid:<dev>/<port>``: the RoCE GID table, consistent across the nodes probed together
  (lesson 26, :mod:`ai4s_graph.tools.cluster.roce_gid`).

Judgement (:mod:`ai4s_graph.tools.cluster.probe_judge`): against the median of the nodes probed
together; with no peer (a 1-node probe), against a measured baseline (``--baseline``, a previous
healthy ``node_health_probe.json``) or a datasheet floor; otherwise the check says ``not checked:
needs ...`` (a comment line in the txt, ``not_checked`` in the JSON), never a silent pass. A node
with any ``fail`` row is bad and the probe exits :data:`BAD_NODE_EXIT_CODE` (42). Checks that
cannot run (one GPU: no all-reduce; no GPU) are recorded under ``skipped`` with the reason.

This module needs only the standard library, numpy and (for GPU parts) torch, so
``python3 -m ai4s_graph.tools.cluster.node_probe`` also runs where the full app is not installed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from pathlib import Path
from typing import Any, Iterable

from . import gpu_bench, roce_gid
from .probe_judge import Thresholds, judge  # noqa: F401  (Thresholds re-exported)
from ...state.publish import publish, publish_many
from ..errors import InputError
from ..files import import_root
from ..slurm.health import BAD_NODE_EXIT_CODE, PROBE_FILE, ProbeRow, format_rows

PROBE_JSON = "node_health_probe.json"
PARTS_DIR = "parts"


def node_name(explicit: str | None = None) -> str:
    """This node's short name: ``explicit``, $SLURMD_NODENAME, or the short hostname."""
    return explicit or os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def default_mounts() -> list[tuple[str, str]]:
    """(label, path) of the mounts the seed's probe writes to: ``home`` (``$HOME``), ``shared``
    (``$AI4S_SHARED_DIR``) and ``container`` (``$AI4S_CONTAINER_DIR``, else the directory of
    ``$APPTAINER_CONTAINER`` / ``$SINGULARITY_CONTAINER``); unset ones are left out."""
    out = [("home", str(Path.home()))]
    if os.environ.get("AI4S_SHARED_DIR"):
        out.append(("shared", os.environ["AI4S_SHARED_DIR"]))
    img = os.environ.get("AI4S_CONTAINER_DIR") or next(
        (os.path.dirname(os.environ[k]) for k in ("APPTAINER_CONTAINER", "SINGULARITY_CONTAINER") if os.environ.get(k)), "")
    if img:
        out.append(("container", img))
    return out


def parse_mount_arg(arg: str) -> tuple[str, str]:
    """``label=path`` or a bare path (label = last path component)."""
    if "=" in arg:
        label, path = arg.split("=", 1)
    else:
        path = arg
        label = Path(arg).name or "root"
    if not label or not path:
        raise InputError(f"--mounts entry {arg!r}: expected LABEL=PATH or PATH")
    return label, path


def probe_mount(label: str, path: str, node: str, nbytes: int = 4096) -> dict[str, Any]:
    """Write ``nbytes`` to a new file in ``path``, fsync, read it back, compare, remove it.
    Returns ``{label, path, ok, detail}``; detail names the failing step and the OS error
    (a missing or read-only mount, or EIO from a broken bind mount, lesson 19)."""
    p = Path(path)
    name = p / f".ai4s-probe-{node}-{os.getpid()}-{time.monotonic_ns()}"
    payload = os.urandom(nbytes)
    step = "stat"
    t0 = time.perf_counter()
    try:
        if not p.is_dir():
            raise FileNotFoundError(2, "no such directory", str(p))
        step = "write"
        with open(name, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        step = "read"
        back = name.read_bytes()
        if back != payload:
            raise OSError(5, "read back differs from what was written", str(name))
        step = "remove"
        name.unlink()
    except OSError as e:
        if step in ("read", "remove"):
            try:
                name.unlink()
            except OSError:
                pass
        why = e.strerror or str(e)
        return {"label": label, "path": path, "ok": False, "detail": f"{path}: {step} failed: {why}"}
    ms = (time.perf_counter() - t0) * 1000
    return {"label": label, "path": path, "ok": True,
            "detail": f"{path}: wrote, read back and removed {nbytes} B in {ms:.1f} ms"}


# ----------------------------------------------------------------------------------------------
# STREAM
# ----------------------------------------------------------------------------------------------

STREAM_BYTES_PER_ELEM = {"copy": 16, "scale": 16, "add": 24, "triad": 24}
"""Bytes counted per float64 element, as STREAM (McCalpin) counts them."""


def stream(n_elems: int = 1 << 25, ntimes: int = 6, threads: int | None = None) -> dict[str, float]:
    """STREAM copy/scale/add/triad on three float64 arrays of ``n_elems`` (default 2^25, 256 MiB
    each), split over ``threads`` threads (default: the CPUs this process may run on; numpy
    releases the GIL in these ufuncs). Best of ``ntimes`` (first excluded, as STREAM does), GB/s =
    counted bytes / s / 10^9. numpy evaluates triad ``a = b + q*c`` in two passes, so triad moves
    more bytes than it is credited with and reads lower than compiled STREAM."""
    import numpy as np  # noqa: PLC0415

    threads = threads or len(os.sched_getaffinity(0))
    a = np.full(n_elems, 1.0)
    b = np.full(n_elems, 2.0)
    c = np.zeros(n_elems)
    q = 3.0
    bounds = [(i * n_elems // threads, (i + 1) * n_elems // threads) for i in range(threads)]

    def k_copy(lo, hi):
        np.copyto(c[lo:hi], a[lo:hi])

    def k_scale(lo, hi):
        np.multiply(c[lo:hi], q, out=b[lo:hi])

    def k_add(lo, hi):
        np.add(a[lo:hi], b[lo:hi], out=c[lo:hi])

    def k_triad(lo, hi):
        np.multiply(c[lo:hi], q, out=a[lo:hi])
        np.add(a[lo:hi], b[lo:hi], out=a[lo:hi])

    kernels = {"copy": k_copy, "scale": k_scale, "add": k_add, "triad": k_triad}
    best = {k: float("inf") for k in kernels}
    with ThreadPoolExecutor(max_workers=threads) as pool:
        for it in range(ntimes):
            for name, fn in kernels.items():
                t0 = time.perf_counter()
                list(pool.map(lambda lh: fn(*lh), bounds))
                t = time.perf_counter() - t0
                if it > 0 or ntimes == 1:
                    best[name] = min(best[name], t)
    return {k: round(STREAM_BYTES_PER_ELEM[k] * n_elems / best[k] / 1e9, 2) for k in kernels}


def numa_nodes() -> list[int]:
    """NUMA node ids from /sys/devices/system/node ([0] when unreadable)."""
    try:
        ids = sorted(int(d[4:]) for d in os.listdir("/sys/devices/system/node") if d.startswith("node") and d[4:].isdigit())
        return ids or [0]
    except OSError:
        return [0]


def _stream_subprocess(prefix: list[str], n_elems: int, ntimes: int) -> dict[str, float]:
    cmd = prefix + [sys.executable, "-m", "ai4s_graph.tools.cluster.node_probe", "--stream-only", "--stream-elems", str(n_elems),
                    "--stream-ntimes", str(ntimes)]
    env = dict(os.environ)
    root = str(import_root())
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(prefix)}: {(p.stderr or p.stdout).strip().splitlines()[-1:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def stream_domains(n_elems: int = 1 << 25, ntimes: int = 6) -> tuple[dict[str, dict[str, float]], list[str]]:
    """STREAM per NUMA domain and across all of them. Returns ({domain: {kernel: GB/s}}, notes).

    With ``numactl`` and more than one NUMA node: ``numa<N>`` = ``--cpunodebind=N --membind=N``
    for each node, ``all`` = ``--interleave=all`` (every CPU, pages spread over every node).
    Otherwise one in-process ``all`` run and a note saying why there is no per-domain run."""
    nodes = numa_nodes()
    notes: list[str] = []
    out: dict[str, dict[str, float]] = {}
    numactl = shutil.which("numactl")
    if len(nodes) > 1 and numactl:
        for n in nodes:
            out[f"numa{n}"] = _stream_subprocess([numactl, f"--cpunodebind={n}", f"--membind={n}"], n_elems, ntimes)
        out["all"] = _stream_subprocess([numactl, "--interleave=all"], n_elems, ntimes)
    else:
        if len(nodes) <= 1:
            notes.append("stream: one NUMA domain on this node, so one run across it")
        else:
            notes.append(f"stream: {len(nodes)} NUMA domains but numactl is not installed, so one unbound run")
        out["all"] = stream(n_elems, ntimes)
    return out, notes


# ----------------------------------------------------------------------------------------------
# one node, then the judgement over all nodes probed together
# ----------------------------------------------------------------------------------------------


def probe_node(node: str, mounts: list[tuple[str, str]], *, gpu: bool = True, stream_elems: int = 1 << 25,
               stream_ntimes: int = 6, allreduce_max_bytes: int = 256 << 20) -> dict[str, Any]:
    """Every measurement on this node; a JSON-able dict (the node's "part"):
    ``{node, started_utc, mounts: [...], stream: {domain: {kernel: GB/s}}, gpu: {...}, skipped: [...]}``.
    Measurements only: pass/fail comes from :func:`evaluate` over all parts."""
    part: dict[str, Any] = {"schema": "ai4s-probe/1", "node": node, "started_utc": gpu_bench.now_utc(), "skipped": []}
    part["mounts"] = [probe_mount(label, path, node) for label, path in mounts]
    part["roce_gids"] = roce_gid.read_gid_tables()  # lesson 26: compared across the nodes in gather
    part["env"] = {k: os.environ[k] for k in ("NCCL_IB_GID_INDEX", "NCCL_IB_HCA") if k in os.environ}
    try:
        part["stream"], notes = stream_domains(stream_elems, stream_ntimes)
        part["skipped"] += notes
    except Exception as e:  # noqa: BLE001
        part["stream"] = {}
        part["stream_error"] = f"{type(e).__name__}: {e}"
    if gpu:
        part["gpu"] = gpu_bench.probe_gpus(allreduce=True, ar_max_bytes=allreduce_max_bytes)
        if "skipped" in part["gpu"]:
            part["skipped"].append(f"gpu: {part['gpu']['skipped']}")
        elif "skipped" in part["gpu"].get("allreduce", {}):
            part["skipped"].append(f"allreduce: {part['gpu']['allreduce']['skipped']}")
    else:
        part["skipped"].append("gpu: --no-gpu given")
    part["elapsed_s"] = None
    return part


def evaluate(parts: list[dict[str, Any]], th: Thresholds = Thresholds(), expected_nodes: Iterable[str] = (),
             baseline: list[dict[str, Any]] | None = None) -> list[ProbeRow]:
    """Pass/fail rows for every part (:func:`~ai4s_graph.tools.cluster.probe_judge.judge`: against
    the nodes probed together, else the ``baseline`` parts, else a datasheet floor). A node in
    ``expected_nodes`` with no part gets a ``probe`` fail row."""
    return judge(parts, th, expected_nodes, baseline)[0]


def load_baseline(path: str | Path) -> list[dict[str, Any]]:
    """The parts of a previous probe's ``node_health_probe.json`` (a measured cluster baseline:
    the reference when a probe has no peers). Raises InputError when it is missing or not one."""
    p = Path(path)
    try:
        d = json.loads(p.read_text())
    except OSError as e:
        raise InputError(f"no probe baseline at {p} ({e.strerror})") from None
    except ValueError as e:
        raise InputError(f"{p}: not JSON ({e})") from None
    parts = d.get("parts") if isinstance(d, dict) else None
    if not isinstance(parts, list) or not all(isinstance(x, dict) and "node" in x for x in parts):
        raise InputError(f"{p}: not a node_health_probe.json (no parts with a node)")
    return parts


def bad_nodes(rows: Iterable[ProbeRow]) -> list[str]:
    """Nodes with at least one failing row, first-seen order."""
    out: dict[str, None] = {}
    for r in rows:
        if not r.ok:
            out.setdefault(r.node, None)
    return list(out)


def write_results(out_dir: str | Path, parts: list[dict[str, Any]], rows: list[ProbeRow],
                  th: Thresholds = Thresholds(), not_checked: list[str] | None = None) -> tuple[Path, Path]:
    """Write ``node_health_probe.txt`` (rows, ``BAD_NODES=``, then one ``# not checked: ...``
    comment line per check that could not be judged, which the file's readers skip) and
    ``node_health_probe.json`` (parts, rows, thresholds, bad nodes, ``not_checked``) into
    ``out_dir``; returns both paths."""
    out = Path(out_dir)
    txt, js = publish_many([(out / PROBE_FILE, format_rows(rows) + "".join(f"# {n}\n" for n in not_checked or [])),
                            (out / PROBE_JSON, json.dumps(
        {"schema": "ai4s-probe/1", "written_utc": gpu_bench.now_utc(), "thresholds": asdict(th),
         "bad_nodes": bad_nodes(rows), "rows": [asdict(r) for r in rows], "not_checked": list(not_checked or []),
         "parts": parts}, indent=1, default=str) + "\n")])  # atomic and together; refuses links
    return txt, js


def write_part(out_dir: str | Path, part: dict[str, Any]) -> Path:
    """Write one node's part to ``<out_dir>/parts/<node>.json`` (atomic rename)."""
    return publish(Path(out_dir) / PARTS_DIR / f"{part['node']}.json", json.dumps(part, indent=1, default=str) + "\n",
                   root=out_dir)  # atomic; refuses links


def read_parts(out_dir: str | Path) -> list[dict[str, Any]]:
    """All parts under ``<out_dir>/parts/``. Raises InputError when there is none or one is not
    a probe part."""
    d = Path(out_dir) / PARTS_DIR
    files = sorted(d.glob("*.json")) if d.is_dir() else []
    if not files:
        raise InputError(f"no probe parts in {d}")
    parts = []
    for f in files:
        try:
            j = json.loads(f.read_text())
        except ValueError as e:
            raise InputError(f"{f}: not JSON ({e})") from e
        if not isinstance(j, dict) or "node" not in j:
            raise InputError(f"{f}: not a probe part (no 'node')")
        parts.append(j)
    return parts


def slurm_nodes() -> list[str]:
    """Nodes of the current SLURM allocation (``scontrol show hostnames``), [] outside SLURM."""
    nl = os.environ.get("SLURM_JOB_NODELIST") or os.environ.get("SLURM_NODELIST")
    if not nl or not shutil.which("scontrol"):
        return []
    p = subprocess.run(["scontrol", "show", "hostnames", nl], capture_output=True, text=True, timeout=30)
    return p.stdout.split() if p.returncode == 0 else []


def gather(out_dir: str | Path, expected_nodes: Iterable[str] = (), wait_s: float = 0.0,
           th: Thresholds = Thresholds(), baseline: list[dict[str, Any]] | None = None) -> tuple[list[ProbeRow], list[str]]:
    """Merge the parts under ``out_dir``: wait up to ``wait_s`` seconds for every expected node's
    part, judge them together (:func:`~ai4s_graph.tools.cluster.probe_judge.judge`, with the
    ``baseline`` parts when there are no peers), write the merged txt/JSON into ``out_dir``.
    Returns (rows, bad nodes)."""
    expected = list(expected_nodes)
    deadline = time.time() + wait_s
    d = Path(out_dir) / PARTS_DIR
    while expected and time.time() < deadline:
        have = {f.stem for f in d.glob("*.json")} if d.is_dir() else set()
        if all(n in have for n in expected):
            break
        time.sleep(0.5)
    parts = read_parts(out_dir)
    rows, notes = judge(parts, th, expected, baseline)
    write_results(out_dir, parts, rows, th, notes)
    return rows, bad_nodes(rows)


def run_probe(out_dir: str | Path, *, node: str | None = None, mounts: list[tuple[str, str]] | None = None,
              gpu: bool = True, stream_elems: int = 1 << 25, stream_ntimes: int = 6,
              gather_wait_s: float = 120.0, baseline: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The whole probe on this node: measure, write the part; outside SLURM (or as SLURM task 0)
    gather all parts (``baseline``: a previous healthy probe's parts, the reference without
    peers) and write the merged results. Returns ``{node, part, rows, bad_nodes,
    exit_code, gathered}``; ``exit_code`` is 42 when this node (or, for the gatherer, any node)
    failed."""
    node = node_name(node)
    mounts = mounts if mounts is not None else default_mounts()
    t0 = time.time()
    part = probe_node(node, mounts, gpu=gpu, stream_elems=stream_elems, stream_ntimes=stream_ntimes)
    part["elapsed_s"] = round(time.time() - t0, 2)
    write_part(out_dir, part)
    own_rows = evaluate([part])
    own_bad = bad_nodes(own_rows)
    procid = os.environ.get("SLURM_PROCID")
    ntasks = int(os.environ.get("SLURM_NTASKS", "1") or 1)
    gathered = procid in (None, "0") or ntasks == 1
    rows, bad = own_rows, own_bad
    if gathered:
        expected = slurm_nodes() if procid is not None else [node]
        rows, bad = gather(out_dir, expected, wait_s=gather_wait_s if len(expected) > 1 else 0, baseline=baseline)
    code = BAD_NODE_EXIT_CODE if (bad if gathered else own_bad) else 0
    return {"node": node, "part": part, "rows": rows, "bad_nodes": bad, "exit_code": code, "gathered": gathered}


def _main(argv: list[str] | None = None) -> int:
    """Minimal argparse entry for nodes without the full app (``python3 -m
    ai4s_graph.tools.cluster.node_probe``); the user-facing command is ``ai4s-graph probe``."""
    ap = argparse.ArgumentParser(prog="python3 -m ai4s_graph.tools.cluster.node_probe")
    ap.add_argument("--out", default="probe-out")
    ap.add_argument("--node")
    ap.add_argument("--mounts", action="append")
    ap.add_argument("--no-gpu", action="store_true")
    ap.add_argument("--gather")
    ap.add_argument("--stream-only", action="store_true")
    ap.add_argument("--stream-elems", type=int, default=1 << 25)
    ap.add_argument("--stream-ntimes", type=int, default=6)
    ap.add_argument("--baseline")
    a = ap.parse_args(argv)
    if a.stream_only:
        print(json.dumps(stream(a.stream_elems, a.stream_ntimes)))
        return 0
    base = load_baseline(a.baseline) if a.baseline else None
    if a.gather:
        rows, bad = gather(a.gather, baseline=base)
    else:
        mounts = [parse_mount_arg(m) for m in a.mounts] if a.mounts else None
        r = run_probe(a.out, node=a.node, mounts=mounts, gpu=not a.no_gpu, stream_elems=a.stream_elems,
                      stream_ntimes=a.stream_ntimes, baseline=base)
        rows, bad = r["rows"], r["bad_nodes"]
        for s in r["part"]["skipped"]:
            print(f"skipped: {s}", file=sys.stderr)
    sys.stdout.write(format_rows(rows))
    return BAD_NODE_EXIT_CODE if bad else 0


if __name__ == "__main__":
    sys.exit(_main())
