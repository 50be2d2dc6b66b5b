"""Storage benchmark of ``gpu_bench.py``: Debian's fio over file sizes, and filesystem facts.

Method: seed 003, "Storage" (16 jobs, 4 KiB blocks, libaio, O_DIRECT, --unlink=1).

Part of ``gpu_bench.py`` (SELF-CONTAINED: standard library + torch + optional NVML/amdsmi; no
pydantic, typer or ai4s_graph import), split out to keep each file under 700 lines. Imported as
``ai4s_graph.tools.cluster.gpu_storage`` in-process, or as a sibling file when ``gpu_bench.py`` runs
as a plain script on a GPU node.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

if __package__:
    from .gpu_common import (FIO_SIZES, _run, parse_iec, format_iec)
else:  # a plain script on a GPU node
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from gpu_common import (FIO_SIZES, _run, parse_iec, format_iec)  # type: ignore  # noqa: E402

# ----------------------------------------------------------------------------------------------
# storage: fio
# ----------------------------------------------------------------------------------------------


def find_fio(explicit: str | None = None) -> str | None:
    """Path of the fio binary: ``explicit``, $AI4S_FIO, or ``fio`` on PATH; None if absent."""
    for c in (explicit, os.environ.get("AI4S_FIO"), shutil.which("fio")):
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def _du_bytes(path: str) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, f)).st_size
    return total


def fio_scan(path: str, sizes: list[str] | tuple[str, ...] = FIO_SIZES, runtime_s: int = 180, numjobs: int = 16,
             fio: str | None = None, timeout_s: float | None = None) -> dict[str, Any]:
    """fio on directory ``path``: for each file size in ``sizes`` (IEC strings), a read and a
    write run of ``numjobs`` jobs, 4 KiB blocks, libaio, O_DIRECT (falls back to psync when the
    filesystem refuses libaio+O_DIRECT — recorded as ``engine``), ``runtime_s`` seconds each,
    ``--unlink=1``. Scratch lives in one directory ``<path>/ai4s-fio-<utc>``; after the runs it
    is removed when empty, otherwise moved to ``<path>/trash/`` (seed 003: move, never rm) and
    named in ``scratch_left``.

    Returns ``{"path", "fs", "rows": [{size, size_bytes, rw, latency_msec, bw_mibps, iops_m}],
    "runtime_s", "numjobs", "engine", "scratch_left"}``; ``{"error"}`` when fio is absent."""
    fio = find_fio(fio)
    if fio is None:
        return {"path": path, "error": "fio is not installed on this node"}
    if not os.path.isdir(path) or not os.access(path, os.W_OK):
        return {"path": path, "error": f"{path}: not a writable directory"}
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    scratch = os.path.join(path, f"ai4s-fio-{stamp}-{os.getpid()}")
    os.makedirs(scratch)
    rows = []
    engine = "libaio"
    direct = 1
    _rc, ver = _run([fio, "--version"])
    try:
        for size in sizes:
            nbytes = parse_iec(size)
            for rw in ("read", "write"):
                base = [fio, f"--name=ai4s-{rw}-{nbytes}", f"--directory={scratch}", f"--rw={rw}", "--bs=4k",
                        f"--filesize={nbytes}", f"--numjobs={numjobs}", "--time_based", f"--runtime={runtime_s}",
                        "--group_reporting", "--unlink=1", "--output-format=json"]
                to = timeout_s or (runtime_s * 4 + 300)
                rc, out = _run(base + [f"--ioengine={engine}", f"--direct={direct}"], timeout=to)
                if rc != 0 and engine == "libaio":
                    engine, direct = "psync", 1
                    rc, out = _run(base + [f"--ioengine={engine}", f"--direct={direct}"], timeout=to)
                    if rc != 0:
                        engine, direct = "psync", 0
                        rc, out = _run(base + [f"--ioengine={engine}", f"--direct={direct}"], timeout=to)
                if rc != 0:
                    raise RuntimeError(f"fio {rw} {size} on {path} failed: {out.splitlines()[-1] if out else rc}")
                j = json.loads(out[out.index("{"):])
                job = j["jobs"][0][rw]
                rows.append({
                    "size": format_iec(nbytes), "size_bytes": nbytes, "rw": rw,
                    "latency_msec": round(job["lat_ns"]["mean"] / 1e6, 3),
                    "bw_mibps": round(job["bw_bytes"] / (1 << 20), 1),
                    "iops_m": round(job["iops"] / 1e6, 4),
                })
    except Exception as e:  # noqa: BLE001
        err = f"{type(e).__name__}: {e}"
    else:
        err = ""
    left = _du_bytes(scratch)
    scratch_left = ""
    if left == 0:
        shutil.rmtree(scratch, ignore_errors=True)  # empty directories only: fio unlinked its files
    else:
        trash = os.path.join(path, "trash", stamp)
        os.makedirs(trash, exist_ok=True)
        shutil.move(scratch, trash)
        scratch_left = f"{trash} ({left} bytes)"
    out = {"path": path, "fs": fs_info(path), "rows": rows, "runtime_s": runtime_s, "numjobs": numjobs,
           "engine": engine, "direct": direct, "fio_version": ver.strip(), "scratch_left": scratch_left}
    if err:
        out["error"] = err
    return out


CONTAINER_LAYERS = ("overlay", "overlayfs", "aufs", "fuse-overlayfs")
"""Union filesystems of containers: seed 003, "the backing FS (xfs, ext4) is the partition type to
report" ("Overlay is not a partition type")."""


def fs_info(path: str, _look_through: bool = True) -> dict[str, Any]:
    """Mount point, filesystem type, size (bytes) and source device/server of ``path`` (from
    ``findmnt``; ``df`` as fallback). Capacity only, never use (seed 003). On a container layer
    (``overlay``) the type, size and source are the backing filesystem's (the one holding the
    overlay's ``upperdir``), and ``layer`` names the overlay."""
    rc, out = _run(["findmnt", "-n", "-b", "-o", "TARGET,FSTYPE,SIZE,SOURCE", "-T", path])
    info: dict[str, Any] | None = None
    if rc == 0 and out:
        parts = out.split()
        if len(parts) >= 4:
            with contextlib.suppress(ValueError):
                info = {"mount": parts[0], "type": parts[1], "size_bytes": int(parts[2]), "source": parts[3]}
    if info is None:
        st = os.statvfs(path)
        return {"mount": path, "type": "", "size_bytes": st.f_blocks * st.f_frsize, "source": ""}
    if _look_through and info["type"] in CONTAINER_LAYERS:
        rc, opts = _run(["findmnt", "-n", "-o", "OPTIONS", "-T", path])
        m = re.search(r"(?:^|,)upperdir=([^,]+)", opts or "")
        if rc == 0 and m and os.path.isabs(m.group(1)):
            back = fs_info(m.group(1), _look_through=False)
            info.update(type=back["type"], size_bytes=back["size_bytes"], source=back["source"], layer=info["type"])
    return info


