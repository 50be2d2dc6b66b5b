"""Node telemetry sampler for the workloads: a thread (started by ``train.py``) or a process
(``python -m ai4s_graph.workloads.telemetry``, started by the sbatch templates).

Self-contained on purpose (stdlib + optional ``pynvml``): it runs on GPU machines that have only
torch installed.

What it samples, every ``interval_s`` (0.25 s on GPU, 0.5 s on CPU by default):

- GPU nodes, through NVML, named exactly as dcgm-exporter names them (``DCGM_FI_DEV_GPU_UTIL`` %,
  ``DCGM_FI_DEV_MEM_COPY_UTIL`` %, ``DCGM_FI_DEV_FB_USED`` / ``_FB_FREE`` MiB,
  ``DCGM_FI_DEV_POWER_USAGE`` W, ``DCGM_FI_DEV_SM_CLOCK`` MHz, ``DCGM_FI_DEV_GPU_TEMP`` C; labels
  gpu, device, modelName, Hostname, instance), like ``../shared/data/perf-runs/*/telemetry``;
- CPU nodes, from /proc, named as node_exporter names them (``node_cpu_seconds_total{cpu,mode}``
  seconds, ``node_memory_MemAvailable_bytes``, ``node_memory_MemTotal_bytes``, ``node_load1``);
  on GPU nodes too when ``$AI4S_TELEMETRY_HOST=1`` (node_exporter beside dcgm-exporter: the host
  CPU that tells a CPU-transform-bound loader from an I/O-bound one, seed 001 T3/T8);
- ``$AI4S_TELEMETRY_GPUS`` (comma-separated NVML indices) restricts the GPUs sampled, numbered
  from 0 in that order as the process sees them under the matching ``CUDA_VISIBLE_DEVICES``;
- always Omnistat's ``rmsjob_info{jobid,user,partition,nodes,batchflag,jobstep,type,instance} = 1``
  while the job runs, so the PromQL join ``metric * on (instance) group_left() (max by (instance)
  (rmsjob_info{jobid="..."}))`` (seed 000 lesson 5) works on it.

Output: ``<out_dir>/export.jsonl`` (or ``export_<instance>.jsonl`` for a second node) in the
VictoriaMetrics JSON-lines export format (one ``{"metric":{...},"values":[...],"timestamps":[ms]}``
per series), rewritten atomically every few seconds and at the end; and, when ``$AI4S_TSDB_URL``
is set, the new samples are pushed to ``<url>/api/v1/import`` every few seconds.
``instance`` is ``$SLURMD_NODENAME`` when set, else the host name.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import signal
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

SeriesKey = tuple[tuple[str, str], ...]


def instance_name() -> str:
    """``$SLURMD_NODENAME`` (node1, node2 on the local cluster) or the short host name."""
    return os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def rmsjob_labels(jobid: str, instance: str) -> dict[str, str]:
    """Labels of Omnistat's ``rmsjob_info`` series for this job on this instance."""
    try:
        user = os.environ.get("SLURM_JOB_USER") or getpass.getuser()
    except Exception:  # pragma: no cover - no passwd entry
        user = str(os.getuid())
    return {
        "__name__": "rmsjob_info", "instance": instance, "jobid": str(jobid), "user": user,
        "partition": os.environ.get("SLURM_JOB_PARTITION", ""),
        "nodes": os.environ.get("SLURM_JOB_NODELIST", instance),
        "batchflag": "1" if os.environ.get("SLURM_JOB_ID") and not os.environ.get("SLURM_PTY_PORT") else "0",
        "jobstep": os.environ.get("SLURM_STEP_ID", "0"), "type": "slurm",
    }


class _Nvml:
    """NVML reader; ``available`` is False when pynvml or a GPU is missing."""

    def __init__(self) -> None:
        self.available = False
        try:
            import pynvml  # type: ignore

            pynvml.nvmlInit()
            self.nv = pynvml
            n = pynvml.nvmlDeviceGetCount()
            # AI4S_TELEMETRY_GPUS="1" samples only NVML GPU 1 (a run pinned there with
            # CUDA_VISIBLE_DEVICES=1), labelled gpu="0" as the process sees it
            only = [int(x) for x in os.environ.get("AI4S_TELEMETRY_GPUS", "").split(",") if x.strip()]
            idx = [i for i in only if 0 <= i < n] if only else list(range(n))
            self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in idx]
            n = len(self.handles)
            self.names = []
            for h in self.handles:
                name = pynvml.nvmlDeviceGetName(h)
                self.names.append(name.decode() if isinstance(name, bytes) else str(name))
            self.available = n > 0
        except Exception:
            self.available = False

    def sample(self, host: str, instance: str) -> list[tuple[dict[str, str], float]]:
        nv = self.nv
        out: list[tuple[dict[str, str], float]] = []
        for i, h in enumerate(self.handles):
            base = {"gpu": str(i), "device": f"nvidia{i}", "modelName": self.names[i], "Hostname": host,
                    "instance": instance}

            def add(name: str, fn) -> None:
                try:
                    out.append(({"__name__": name, **base}, float(fn())))
                except Exception:
                    pass

            util = None
            try:
                util = nv.nvmlDeviceGetUtilizationRates(h)
            except Exception:
                pass
            if util is not None:
                out.append(({"__name__": "DCGM_FI_DEV_GPU_UTIL", **base}, float(util.gpu)))
                out.append(({"__name__": "DCGM_FI_DEV_MEM_COPY_UTIL", **base}, float(util.memory)))
            try:
                mem = nv.nvmlDeviceGetMemoryInfo(h)
                out.append(({"__name__": "DCGM_FI_DEV_FB_USED", **base}, float(mem.used // (1024 * 1024))))
                out.append(({"__name__": "DCGM_FI_DEV_FB_FREE", **base}, float(mem.free // (1024 * 1024))))
            except Exception:
                pass
            add("DCGM_FI_DEV_POWER_USAGE", lambda: nv.nvmlDeviceGetPowerUsage(h) / 1000.0)
            add("DCGM_FI_DEV_SM_CLOCK", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))
            add("DCGM_FI_DEV_GPU_TEMP", lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU))
        return out


_CPU_MODES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def sample_proc(instance: str) -> list[tuple[dict[str, str], float]]:
    """node_exporter-named node metrics from /proc (Linux). Units: seconds, bytes, load."""
    out: list[tuple[dict[str, str], float]] = []
    hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    try:
        for line in Path("/proc/stat").read_text().splitlines():
            if line.startswith("cpu") and line[3:4].isdigit():
                parts = line.split()
                cpu = parts[0][3:]
                for mode, v in zip(_CPU_MODES, parts[1:9]):
                    out.append(({"__name__": "node_cpu_seconds_total", "cpu": cpu, "mode": mode,
                                 "instance": instance}, int(v) / hz))
    except OSError:
        pass
    try:
        mem = {}
        for line in Path("/proc/meminfo").read_text().splitlines():
            k, _, rest = line.partition(":")
            mem[k] = int(rest.split()[0]) * 1024
        for k in ("MemAvailable", "MemTotal"):
            if k in mem:
                out.append(({"__name__": f"node_memory_{k}_bytes", "instance": instance}, float(mem[k])))
    except (OSError, ValueError, IndexError):
        pass
    try:
        out.append(({"__name__": "node_load1", "instance": instance},
                    float(Path("/proc/loadavg").read_text().split()[0])))
    except (OSError, ValueError, IndexError):
        pass
    return out


class Sampler(threading.Thread):
    """Background sampler. ``start()``, then ``stop()`` (writes the final export and pushes the
    rest). ``path`` is the export file; ``samples`` counts sampling rounds."""

    def __init__(self, out_dir: str | Path, jobid: str, *, interval_s: float | None = None,
                 tsdb_url: str | None = None, file_name: str | None = None, flush_every_s: float = 5.0):
        super().__init__(daemon=True, name="ai4s-telemetry")
        self.instance = instance_name()
        self.host = socket.gethostname().split(".")[0]
        self.nvml = _Nvml()
        self.host_cpu = os.environ.get("AI4S_TELEMETRY_HOST") == "1"
        self.interval_s = interval_s or float(os.environ.get("AI4S_TELEMETRY_INTERVAL",
                                                             0.25 if self.nvml.available else 0.5))
        self.jobid = str(jobid)
        self.tsdb_url = (tsdb_url if tsdb_url is not None else os.environ.get("AI4S_TSDB_URL", "")).rstrip("/")
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        self.path = out / (file_name or "export.jsonl")
        self.flush_every_s = flush_every_s
        self._series: dict[SeriesKey, tuple[list[float], list[int]]] = {}
        self._pushed: dict[SeriesKey, int] = {}
        self._lock = threading.Lock()
        self._stop_evt = threading.Event()
        self.samples = 0
        self.push_errors = 0
        self.pushed_samples = 0

    def _record(self, labels: dict[str, str], value: float, ts_ms: int) -> None:
        key = tuple(sorted(labels.items()))
        vals, tss = self._series.setdefault(key, ([], []))
        vals.append(value)
        tss.append(ts_ms)

    def sample_once(self) -> None:
        """One sampling round (GPU through NVML when available, else /proc, and /proc beside NVML
        when ``$AI4S_TELEMETRY_HOST=1``; plus rmsjob_info)."""
        ts = int(time.time() * 1000)
        rows = self.nvml.sample(self.host, self.instance) if self.nvml.available else []
        if not self.nvml.available or self.host_cpu:
            rows += sample_proc(self.instance)
        with self._lock:
            for labels, v in rows:
                self._record(labels, v, ts)
            self._record(rmsjob_labels(self.jobid, self.instance), 1.0, ts)
            self.samples += 1

    @staticmethod
    def _line(key: SeriesKey, vals: list[float], tss: list[int]) -> str:
        metric = dict(key)
        name = metric.pop("__name__")
        return json.dumps({"metric": {"__name__": name, **metric}, "values": vals, "timestamps": tss})

    def write(self) -> Path:
        """Rewrite the export file atomically with every sample so far."""
        with self._lock:
            lines = [self._line(k, v, t) for k, (v, t) in self._series.items()]
        tmp = self.path.with_suffix(".jsonl.tmp")
        tmp.write_text("\n".join(lines) + ("\n" if lines else ""))
        tmp.replace(self.path)
        return self.path

    def push(self) -> int:
        """POST the samples not pushed yet to ``<tsdb_url>/api/v1/import``; returns how many.
        A refused push is counted in ``push_errors`` (one warning on stderr) and retried later."""
        if not self.tsdb_url:
            return 0
        with self._lock:
            lines, marks, n = [], {}, 0
            for k, (v, t) in self._series.items():
                start = self._pushed.get(k, 0)
                if start < len(v):
                    lines.append(self._line(k, v[start:], t[start:]))
                    marks[k] = len(v)
                    n += len(v) - start
        if not lines:
            return 0
        req = urllib.request.Request(self.tsdb_url + "/api/v1/import", data=("\n".join(lines) + "\n").encode(),
                                     method="POST", headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=5) as r:
                r.read()
        except (urllib.error.URLError, OSError) as e:
            if self.push_errors == 0:
                print(f"ai4s-telemetry: push to {self.tsdb_url} failed: {e}", file=sys.stderr)
            self.push_errors += 1
            return 0
        with self._lock:
            self._pushed.update(marks)
        self.pushed_samples += n
        return n

    def run(self) -> None:
        last_flush = time.monotonic()
        while not self._stop_evt.is_set():
            t0 = time.monotonic()
            try:
                self.sample_once()
            except Exception as e:  # pragma: no cover - never kill the workload for telemetry
                print(f"ai4s-telemetry: sample failed: {e}", file=sys.stderr)
            if time.monotonic() - last_flush >= self.flush_every_s:
                self.write()
                self.push()
                last_flush = time.monotonic()
            self._stop_evt.wait(max(0.0, self.interval_s - (time.monotonic() - t0)))

    def stop(self) -> Path:
        """Stop sampling (one last round), write the export, push the rest; returns the path."""
        self._stop_evt.set()
        if self.is_alive():
            self.join(timeout=10)
        self.sample_once()
        path = self.write()
        if self.tsdb_url:
            self.push()
            try:  # make the pushed samples queryable at once
                urllib.request.urlopen(self.tsdb_url + "/internal/force_flush", timeout=5).read()
            except (urllib.error.URLError, OSError):
                pass
        return path


def main(argv: list[str] | None = None) -> int:
    """Run a sampler until ``--stop-file`` appears, ``--duration`` passes, or SIGTERM/SIGINT."""
    ap = argparse.ArgumentParser(description="ai4s node telemetry sampler (NVML or /proc)")
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--jobid", default=os.environ.get("SLURM_JOB_ID", "0"))
    ap.add_argument("--interval", type=float, default=None, help="seconds between samples")
    ap.add_argument("--duration", type=float, default=None, help="stop after this many seconds")
    ap.add_argument("--stop-file", default=None, help="stop when this file exists")
    ap.add_argument("--file-name", default=None)
    a = ap.parse_args(argv)
    inst = instance_name()
    first_node = os.environ.get("SLURM_NODEID", "0") == "0"
    s = Sampler(a.out_dir, a.jobid, interval_s=a.interval,
                file_name=a.file_name or ("export.jsonl" if first_node else f"export_{inst}.jsonl"))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    s.start()
    t_end = time.monotonic() + a.duration if a.duration else None
    while not stop.is_set():
        if a.stop_file and Path(a.stop_file).exists():
            break
        if t_end is not None and time.monotonic() >= t_end:
            break
        stop.wait(0.2)
    path = s.stop()
    print(f"ai4s-telemetry: {s.samples} samples -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
