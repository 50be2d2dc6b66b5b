"""Shared helpers of ``gpu_bench.py``: units, subprocess calls, and NVML/amdsmi telemetry
(sampled while a measurement runs). Self-contained like ``gpu_bench.py`` (standard library +
torch + optional ``pynvml``/``amdsmi``), so it runs as a plain script on a GPU node; what is
measured and the source of each method are in ``gpu_bench.py``'s docstring."""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

SCHEMA = "ai4s-gpu-bench/1"
LEMON_DIM = 16384
"""Seed 003, "Find underperforming GPUs": fixed 16384^3 bf16 matmul on every GPU."""
LEMON_TILE = (128, 256)
"""Seed 003: SM coverage is computed for 128x256 output tiles (one CTA each)."""
SLOW_GPU_FRACTION = 0.02
"""Seed 003: a GPU is under-performing only if >2% below its node median in all three passes."""
MSMF_POWER_FRACTION = 0.90
"""An MSMF shape counts only if mean board power reached >= 90% of the enforced power limit
(seed 003: MSMF is measured once the shape pins the board at its power limit; mamf-finder labels
shapes that never reach it SUSPECT)."""
FIO_SIZES = ("16KiB", "1MiB", "1GiB")
"""Seed 003, fio-scan: file sizes 16 KiB, 1 MiB and 1 GiB, each read and write."""

_IEC = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}


def now_utc() -> str:
    """UTC time as ``2026-11-29T14:35:02Z``."""
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_iec(text: str) -> int:
    """``'16KiB'`` -> 16384 bytes. Accepts ``KiB MiB GiB TiB`` (with or without a space) or a
    plain byte count. Raises ValueError on anything else (decimal units are refused: fio sizes in
    this project are binary)."""
    t = str(text).strip().replace(" ", "")
    for unit, mult in _IEC.items():
        if t.endswith(unit):
            return int(float(t[: -len(unit)]) * mult)
    if t.isdigit():
        return int(t)
    raise ValueError(f"not an IEC size: {text!r} (use e.g. 16KiB, 1MiB, 1GiB)")


def format_iec(n: int) -> str:
    """16384 -> ``'16 KiB'`` (largest unit that divides exactly; bytes otherwise)."""
    for unit in ("TiB", "GiB", "MiB", "KiB"):
        m = _IEC[unit]
        if n >= m and n % m == 0:
            return f"{n // m} {unit}"
    return f"{n} B"


def _run(cmd: list[str], timeout: float = 30.0) -> tuple[int, str]:
    """Run a command; (returncode, stdout+stderr). (127, message) when it is not installed."""
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        return p.returncode, (p.stdout + p.stderr).strip()
    except FileNotFoundError:
        return 127, f"{cmd[0]}: not installed"
    except subprocess.TimeoutExpired:
        return 124, f"{cmd[0]}: timed out after {timeout:.0f} s"


# ----------------------------------------------------------------------------------------------
# torch and the management library (NVML / amdsmi)
# ----------------------------------------------------------------------------------------------


def torch_or_none():
    """The torch module, or None when torch is not importable."""
    try:
        import torch  # noqa: PLC0415

        return torch
    except Exception:  # pragma: no cover - torch missing
        return None


def gpu_count() -> tuple[int, str]:
    """(number of visible GPUs, reason when 0)."""
    torch = torch_or_none()
    if torch is None:
        return 0, "torch is not installed"
    if not torch.cuda.is_available():
        return 0, "no GPU visible to torch (torch.cuda.is_available() is False)"
    return torch.cuda.device_count(), ""


class Telemetry:
    """Board power (W) and SM clock (MHz) per GPU through NVML (``pynvml``) or, on AMD,
    ``amdsmi``. ``available`` is False with ``reason`` when neither library works."""

    def __init__(self) -> None:
        self.kind = ""
        self.reason = ""
        self._nv = None
        self._amd = None
        self._handles: list[Any] = []
        try:
            import pynvml  # noqa: PLC0415

            pynvml.nvmlInit()
            self._nv = pynvml
            self.kind = "nvml"
            n = pynvml.nvmlDeviceGetCount()
            self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(n)]
            return
        except Exception as e:  # noqa: BLE001
            self.reason = f"pynvml: {type(e).__name__}: {e}"
        try:
            import amdsmi  # noqa: PLC0415

            amdsmi.amdsmi_init()
            self._amd = amdsmi
            self.kind = "amdsmi"
            self._handles = list(amdsmi.amdsmi_get_processor_handles())
            self.reason = ""
        except Exception as e:  # noqa: BLE001
            self.reason += f"; amdsmi: {type(e).__name__}: {e}"

    @property
    def available(self) -> bool:
        return bool(self._handles)

    def sample(self, i: int) -> tuple[float | None, float | None]:
        """(power W, SM clock MHz) of GPU ``i`` now; Nones when unreadable."""
        try:
            if self._nv is not None:
                h = self._handles[i]
                w = self._nv.nvmlDeviceGetPowerUsage(h) / 1000.0
                mhz = float(self._nv.nvmlDeviceGetClockInfo(h, self._nv.NVML_CLOCK_SM))
                return w, mhz
            if self._amd is not None:
                h = self._handles[i]
                p = self._amd.amdsmi_get_power_info(h)
                w = p.get("current_socket_power") or p.get("average_socket_power")
                c = self._amd.amdsmi_get_clock_info(h, self._amd.AmdSmiClkType.GFX)
                return float(w), float(c.get("clk") or c.get("cur_clk"))
        except Exception:  # noqa: BLE001
            pass
        return None, None

    def static(self, i: int) -> dict[str, Any]:
        """Power limit (W), max SM clock (MHz), name, memory (bytes), driver of GPU ``i``."""
        out: dict[str, Any] = {}
        try:
            if self._nv is not None:
                nv, h = self._nv, self._handles[i]
                out["power_limit_w"] = nv.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0
                out["max_sm_mhz"] = float(nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM))
                out["idle_sm_mhz"] = float(nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM))
                out["idle_power_w"] = nv.nvmlDeviceGetPowerUsage(h) / 1000.0
                out["memory_total_bytes"] = int(nv.nvmlDeviceGetMemoryInfo(h).total)
                name = nv.nvmlDeviceGetName(h)
                out["name"] = name.decode() if isinstance(name, bytes) else name
                drv = nv.nvmlSystemGetDriverVersion()
                out["driver"] = drv.decode() if isinstance(drv, bytes) else drv
                with contextlib.suppress(Exception):
                    out["pcie_gen_max"] = int(nv.nvmlDeviceGetMaxPcieLinkGeneration(h))
                    out["pcie_width_max"] = int(nv.nvmlDeviceGetMaxPcieLinkWidth(h))
        except Exception as e:  # noqa: BLE001
            out["error"] = f"{type(e).__name__}: {e}"
        return out


class Sampler:
    """Background thread sampling (time, W, MHz) of one GPU every ``interval`` seconds.

    ``window(t0, t1)`` -> mean/max power and mean/min SM clock of the samples in [t0, t1]."""

    def __init__(self, tel: Telemetry, index: int, interval: float = 0.05):
        self.tel, self.index, self.interval = tel, index, interval
        self.samples: list[tuple[float, float, float]] = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            w, mhz = self.tel.sample(self.index)
            if w is not None and mhz is not None:
                self.samples.append((time.perf_counter(), w, mhz))
            self._stop.wait(self.interval)

    def __enter__(self) -> "Sampler":
        if self.tel.available:
            self._t.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._t.is_alive():
            self._t.join(timeout=2)

    def window(self, t0: float, t1: float) -> dict[str, float | None]:
        s = [x for x in self.samples if t0 <= x[0] <= t1]
        if not s:
            return {"power_w": None, "power_w_max": None, "sm_mhz": None, "sm_mhz_min": None, "samples": 0}
        ws = [x[1] for x in s]
        ms = [x[2] for x in s]
        return {
            "power_w": round(statistics.fmean(ws), 1),
            "power_w_max": round(max(ws), 1),
            "sm_mhz": round(statistics.fmean(ms)),
            "sm_mhz_min": round(min(ms)),
            "samples": len(s),
        }


