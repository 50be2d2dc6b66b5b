"""A private, throw-away VictoriaMetrics single-node server on loopback.

The analysts query GPU telemetry with PromQL (seed 000, lessons 5 and 20). On a cluster that is
the user-mode VictoriaMetrics the launcher started; here, and in tests, it is Debian's
``victoria-metrics`` binary (v1.79.5) started by :class:`VictoriaMetrics` on a free loopback port
with its own storage directory, loaded from a JSON-lines export (``/api/v1/export`` format).

Flags and why (``/work/shared/notes/victoriametrics.md``, seed 000 lesson 3, Omnistat's user-mode
launcher):

- ``-retentionPeriod=100y``: samples older than the retention are silently dropped at import
  (the import still answers 204), and the shared runs carry old-ish timestamps.
- ``-search.latencyOffset=0``: with the default 30 s, just-written samples are invisible.
- ``-search.disableCache``: imports back-fill old timestamps; a cached rollup would hide them.
- ``-search.maxPointsPerTimeseries=90000``: as Omnistat starts it, for fine-step range queries.
- ``-fs.disableMmap``: a login node's cgroup can forbid mmap of even a 1.6 MB DB (lesson 3).
- ``-dedup.minScrapeInterval=1ms``: re-importing the same export must not duplicate samples.

Errors: a missing binary or a server that does not come up raises
:class:`~ai4s_graph.tools.errors.ToolUnavailableError` (one line); a rejected import raises
:class:`~ai4s_graph.tools.errors.InputError`.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import threading
import weakref
from pathlib import Path
from types import TracebackType

import requests
from tenacity import (Retrying, retry, retry_if_exception_type, retry_if_result, stop_after_attempt, stop_after_delay,
                      wait_fixed)

from ..errors import InputError, ToolUnavailableError
from .export import ExportReport, Series, export_raw, read_export, to_jsonl

#: Where Debian's ``victoria-metrics`` package puts the binary.
DEFAULT_BINARY = "/usr/bin/victoria-metrics"
#: Environment variable naming another binary (e.g. a newer release unpacked by hand).
BINARY_ENV = "AI4S_VICTORIA_METRICS"
INSTALL_HINT = "apt-get install victoria-metrics"

#: Flags every server gets; see the module docstring for the source of each.
BASE_FLAGS: tuple[str, ...] = (
    "-retentionPeriod=100y",
    "-search.latencyOffset=0",
    "-search.disableCache",
    "-search.maxPointsPerTimeseries=90000",
    "-fs.disableMmap",
    "-dedup.minScrapeInterval=1ms",
)


def find_binary() -> str:
    """Path of the ``victoria-metrics`` binary: ``$AI4S_VICTORIA_METRICS``, then ``PATH``, then
    ``/usr/bin/victoria-metrics``.

    Raises :class:`ToolUnavailableError` ("... not found; apt-get install victoria-metrics")."""
    env = os.environ.get(BINARY_ENV)
    if env:
        if os.access(env, os.X_OK) and Path(env).is_file():
            return env
        raise ToolUnavailableError(f"victoria-metrics binary not found at ${BINARY_ENV}={env}; {INSTALL_HINT}")
    found = shutil.which("victoria-metrics")
    if found:
        return found
    if os.access(DEFAULT_BINARY, os.X_OK):
        return DEFAULT_BINARY
    raise ToolUnavailableError(f"victoria-metrics binary not found on PATH or at {DEFAULT_BINARY}; {INSTALL_HINT}")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


_retry_connection = retry(
    retry=retry_if_exception_type((requests.ConnectionError, requests.Timeout)),
    stop=stop_after_attempt(3),
    wait=wait_fixed(0.2),
    reraise=True,
)


#: Servers started and not stopped in this process (:func:`stop_all`).
_LIVE: "weakref.WeakSet[VictoriaMetrics]" = weakref.WeakSet()


def stop_all() -> int:
    """Stop every server this process started and has not stopped (:meth:`VictoriaMetrics.stop`):
    what a run interrupted by a signal calls before it exits at once (``ai4s-graph run``), since the
    thread that started a server does not unwind then. Returns how many were stopped; never raises."""
    n = 0
    for vm in list(_LIVE):
        try:
            vm.stop()
            n += 1
        except Exception:  # noqa: BLE001 - stopping on the way out: the next one still gets its turn
            pass
    return n


class VictoriaMetrics:
    """A ``victoria-metrics`` server on ``127.0.0.1:<free port>``; use as a context manager.

    ``storage_dir``: the ``-storageDataPath`` (kept on exit); ``None`` makes a temporary one that
    is removed on exit. ``extra_flags``: appended to :data:`BASE_FLAGS`. ``start_timeout_s``:
    how long to wait for ``/health`` to answer ``OK``. ``stop_timeout_s``: how long to wait after
    SIGTERM before SIGKILL.

    >>> with VictoriaMetrics() as vm:                      # doctest: +SKIP
    ...     vm.import_jsonl("perf-runs/91003/telemetry/export.jsonl")
    ...     vm.url                                          # 'http://127.0.0.1:38417'

    Raises :class:`ToolUnavailableError` when the binary is missing or the server does not
    answer ``/health`` in time (the message carries the last line of its log)."""

    def __init__(
        self,
        storage_dir: str | os.PathLike[str] | None = None,
        *,
        binary: str | None = None,
        extra_flags: tuple[str, ...] | list[str] = (),
        start_timeout_s: float = 30.0,
        stop_timeout_s: float = 10.0,
    ):
        self.binary = binary or find_binary()
        self._given_dir = Path(storage_dir) if storage_dir is not None else None
        self.extra_flags = tuple(extra_flags)
        self.start_timeout_s = start_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_path: Path | None = None
        self._log_file = None
        self.port: int | None = None
        self.storage_dir: Path | None = None
        self._session = requests.Session()
        self._stopping = threading.RLock()  # RLock: stop_all from a signal handler in the thread stopping it

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>`` of the running server (``RuntimeError`` if not started)."""
        if self.port is None:
            raise RuntimeError("VictoriaMetrics is not started")
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        """True while the server process is alive."""
        return self._proc is not None and self._proc.poll() is None

    def start(self) -> "VictoriaMetrics":
        """Start the server and wait for ``/health``. Retries on a new port (up to 3 times) if the
        chosen one was taken in the meantime. Returns ``self``."""
        if self.running:
            return self
        if self._given_dir is not None:
            self._given_dir.mkdir(parents=True, exist_ok=True)
            self.storage_dir = self._given_dir
            log_dir = self._given_dir.parent
        else:
            self._tmp = tempfile.TemporaryDirectory(prefix="ai4s-vm-")
            self.storage_dir = Path(self._tmp.name) / "data"
            log_dir = Path(self._tmp.name)
        self._log_path = log_dir / f"victoria-metrics.{os.getpid()}.{id(self)}.log"
        last_err = ""
        for _ in range(3):
            self.port = _free_port()
            cmd = [
                self.binary,
                f"-storageDataPath={self.storage_dir}",
                f"-httpListenAddr=127.0.0.1:{self.port}",
                *BASE_FLAGS,
                *self.extra_flags,
            ]
            self._log_file = open(self._log_path, "ab")
            self._proc = subprocess.Popen(
                cmd, stdout=self._log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
            _LIVE.add(self)  # from its start: a run stopped while it starts stops it too (stop_all)
            if self._wait_healthy():
                return self
            last_err = self._log_tail()
            self._terminate()
            if "address already in use" not in last_err:
                break
        self._cleanup_dirs()
        _LIVE.discard(self)
        raise ToolUnavailableError(
            f"victoria-metrics did not answer /health within {self.start_timeout_s:g}s: {last_err or 'no log output'}"
        )

    def _wait_healthy(self) -> bool:
        """Poll ``/health`` every 50 ms (tenacity) for ``start_timeout_s``: True once it answers OK,
        False when the process exits or the time runs out."""

        def probe() -> bool | None:  # None: not yet
            if self._proc is None or self._proc.poll() is not None:
                return False
            try:
                r = self._session.get(f"{self.url}/health", timeout=1.0)
                if r.status_code == 200 and r.text.strip() == "OK":
                    return True
            except requests.RequestException:
                pass
            return None

        return bool(Retrying(stop=stop_after_delay(self.start_timeout_s), wait=wait_fixed(0.05),
                             retry=retry_if_result(lambda r: r is None),
                             retry_error_callback=lambda state: False)(probe))

    def _log_tail(self) -> str:
        try:
            lines = [ln for ln in self._log_path.read_text(errors="replace").splitlines() if ln.strip()]
        except (OSError, AttributeError):
            return ""
        for ln in reversed(lines):
            if "error" in ln.lower() or "fatal" in ln.lower() or "panic" in ln.lower():
                return ln.strip()[:300]
        return lines[-1].strip()[:300] if lines else ""

    def _terminate(self) -> None:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        self._proc = None
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def _cleanup_dirs(self) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def stop(self) -> None:
        """SIGTERM, wait up to ``stop_timeout_s`` (VictoriaMetrics flushes on SIGTERM), then
        SIGKILL; removes a temporary storage directory. Safe to call twice, and from two threads
        at once (one stops it, the other waits for that)."""
        with self._stopping:
            self._terminate()
            self._session.close()
            self._cleanup_dirs()
            _LIVE.discard(self)  # last: a stop cut short leaves it to stop_all

    def __enter__(self) -> "VictoriaMetrics":
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __del__(self) -> None:  # last resort: never leave a server behind
        try:
            self._terminate()
        except Exception:
            pass

    @property
    def log_path(self) -> Path | None:
        """The server's log file: in the temporary directory, or beside a given storage dir."""
        return self._log_path

    def log_text(self) -> str:
        """The server's log so far (stdout and stderr)."""
        return self._log_path.read_text(errors="replace") if self._log_path and self._log_path.exists() else ""

    # -- data in -----------------------------------------------------------------------------

    @_retry_connection
    def _post(self, path: str, data: bytes, content_type: str) -> None:
        r = self._session.post(f"{self.url}{path}", data=data, headers={"Content-Type": content_type}, timeout=60)
        if r.status_code >= 400:
            msg = " ".join(r.text.split())[:200]
            raise InputError(f"VictoriaMetrics rejected POST {path}: HTTP {r.status_code}: {msg}")

    def import_jsonl(self, path: str | os.PathLike[str], *, flush: bool = True) -> int:
        """POST a JSON-lines export (``/api/v1/export`` format: one
        ``{"metric":{...},"values":[...],"timestamps":[ms,...]}`` per line) to ``/api/v1/import``.

        Returns the number of series lines sent. ``flush``: call :meth:`flush` afterwards so the
        samples are queryable at once. Raises :class:`InputError` for a missing/empty file or a
        rejected import. Note: samples older than the retention are dropped silently by the
        server (hence ``-retentionPeriod=100y``)."""
        p = Path(path)
        if not p.is_file():
            raise InputError(f"telemetry export not found: {p}")
        data = p.read_bytes()
        lines = sum(1 for ln in data.splitlines() if ln.strip())
        if lines == 0:
            raise InputError(f"telemetry export is empty: {p}")
        self._post("/api/v1/import", data, "application/json")
        if flush:
            self.flush()
        return lines

    def import_export(self, path: str | os.PathLike[str], gpu_name: str | None = None) -> "ImportResult":
        """Read a JSON-lines export as :func:`.export.read_export` does (null values are missing
        samples, bad lines and implausible samples left out, all counted), import its finite
        samples, then read every series back (``/api/v1/export``) and compare with the export:
        a series missing or short of samples in the store is imported once more, and what is
        still missing after that is named in :attr:`ImportResult.lost`. Raises
        :class:`InputError` for a missing/empty file or a rejected import."""
        series, rep = read_export(path, gpu_name)
        want = {s.labels_key(): sum(1 for v in s.values if v == v and abs(v) != float("inf")) for s in series}
        want = {k: n for k, n in want.items() if n}
        by_key = {s.labels_key(): s for s in series}
        self._post("/api/v1/import", to_jsonl(series), "application/json")
        self.flush()
        short = self._short_series(series, want)
        reimported = len(short)
        if short:
            self._post("/api/v1/import", to_jsonl(by_key[k] for k in short), "application/json")
            self.flush()
            short = self._short_series(series, want)
        lost = [f"{by_key[k].name}{{{','.join(f'{a}={b!r}' for a, b in k if a != '__name__')}}}" for k in short]
        return ImportResult(series, rep, len(want), reimported, lost)

    def _short_series(self, series: list[Series], want: dict[tuple, int]) -> list[tuple]:
        """Keys of ``want`` whose series the store holds fewer samples of than ``want`` says."""
        ts = [t for s in series for t in s.timestamps]
        if not ts:
            return []
        got = {s.labels_key(): len(s.values)
               for s in export_raw(self.url, '{__name__=~".+"}', min(ts) - 1, max(ts) + 1, timeout_s=60)}
        return [k for k, n in want.items() if got.get(k, 0) < n]

    def import_prometheus(self, text: str, *, flush: bool = True) -> None:
        """POST Prometheus text exposition (``name{labels} value [timestamp_ms]`` lines) to
        ``/api/v1/import/prometheus``. Lines without a timestamp get the server's current time."""
        self._post("/api/v1/import/prometheus", text.encode(), "text/plain")
        if flush:
            self.flush()

    @_retry_connection
    def flush(self) -> None:
        """``GET /internal/force_flush``: make just-imported samples searchable now."""
        r = self._session.get(f"{self.url}/internal/force_flush", timeout=30)
        r.raise_for_status()


class ImportResult:
    """What :meth:`VictoriaMetrics.import_export` did: the ``series`` read, the export's
    :class:`~.export.ExportReport`, how many series with finite samples were sent
    (``expected``), how many had to be sent again (``reimported``) and those still missing or
    short in the store after that (``lost``, as ``name{label='value',...}``)."""

    def __init__(self, series: list[Series], report: ExportReport, expected: int, reimported: int, lost: list[str]):
        self.series, self.report, self.expected, self.reimported, self.lost = series, report, expected, reimported, lost

    def problems(self) -> list[str]:
        """The export's losses (:meth:`.export.ExportReport.problems`) and the import's, one line each."""
        name = Path(self.report.origin).name
        out = self.report.problems()
        if self.lost:
            out.append(f"{name}: {len(self.lost)} of {self.expected} series did not arrive in VictoriaMetrics after a "
                       f"re-import ({', '.join(self.lost[:3])}{', ...' if len(self.lost) > 3 else ''})")
        elif self.reimported:
            out.append(f"{name}: {self.reimported} series re-imported (missing from the store after the first import); "
                       f"all {self.expected} series arrived")
        return out
