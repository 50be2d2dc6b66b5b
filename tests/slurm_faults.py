"""Real SLURM failures for the tests, without touching the shared cluster's daemons.

- :func:`broken_conf`: a copy of the cluster's ``slurm.conf`` whose slurmdbd or slurmctld port is
  one nothing listens on ("down": the real client prints its real ``Connection refused`` /
  ``Unable to contact slurm controller (connect failure)``), or one where a listener accepts and
  never answers ("hung": ``Socket timed out on send/recv operation``, or no answer at all).
- :func:`failing_first`: a wrapper put first on PATH that runs the REAL client under such a
  broken config for its first ``k`` calls (or dies by a signal, or exits 1 silently) and then
  ``exec``s the real client normally. Nothing here scripts an answer: every line the code under
  test reads comes from SLURM's own binaries.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import threading
from pathlib import Path


#: The job of a run directory without manifest.json whose job sacct must not know: an id the local
#: cluster never reaches (its counter starts at 1; SLURM's MaxJobId defaults to 67043328, slurm.conf(5)).
#: Job 900 was used before, and it existed once a day's suites on this machine had submitted 900 jobs.
UNKNOWN_JOBID = "67043327"


def real(tool: str) -> str:
    """The real client's path (resolved before any wrapper goes on PATH)."""
    exe = shutil.which(tool)
    assert exe, f"{tool} not installed"
    return exe


def free_port() -> int:
    """A loopback TCP port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class HungListener:
    """A loopback listener that accepts connections and never answers (a daemon that hangs)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self._held: list[socket.socket] = []
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._serve, daemon=True)
        self._t.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                c, _ = self.sock.accept()
                self._held.append(c)
            except OSError:
                continue

    def close(self) -> None:
        self._stop.set()
        self._t.join(timeout=2)
        for c in self._held:
            c.close()
        self.sock.close()


def broken_conf(tmp: Path, *, dbd_port: int | None = None, ctl_port: int | None = None,
                message_timeout: int | None = None) -> Path:
    """A copy of the cluster's slurm.conf (``$SLURM_CONF`` or /etc/slurm/slurm.conf) with
    ``AccountingStoragePort`` / ``SlurmctldPort`` / ``MessageTimeout`` replaced."""
    src = Path(os.environ.get("SLURM_CONF") or "/etc/slurm/slurm.conf")
    text = src.read_text()
    for key, val in (("AccountingStoragePort", dbd_port), ("SlurmctldPort", ctl_port),
                     ("MessageTimeout", message_timeout)):
        if val is None:
            continue
        text, n = re.subn(rf"(?im)^{key}=.*$", f"{key}={val}", text)
        if n == 0:
            text += f"\n{key}={val}\n"
    tmp.mkdir(parents=True, exist_ok=True)
    p = tmp / f"slurm-{dbd_port}-{ctl_port}-{message_timeout}.conf"
    p.write_text(text)
    return p


def failing_first(bin_dir: Path, tool: str, k: int, *, conf: Path | None = None, how: str = "conf",
                  delay_s: float = 0.0) -> Path:
    """Write ``bin_dir/<tool>``: its first ``k`` calls fail, later calls ``exec`` the real tool.

    ``how``: ``conf`` runs the real tool under ``conf`` (its real error), ``signal`` kills itself
    with SIGKILL, ``silent`` exits 1 with no output, ``sleep`` only sleeps ``delay_s`` seconds (a
    command that does not answer within its caller's timeout, and is killed by it). The number of
    calls so far is in ``bin_dir/<tool>.calls``. Returns the wrapper's path."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    counter = bin_dir / f"{tool}.calls"
    fail = {"conf": f'SLURM_CONF="{conf}" exec "{real(tool)}" "$@"', "signal": "kill -9 $$",
            "silent": "exit 1", "sleep": f"exec sleep {delay_s}"}[how]
    w = bin_dir / tool
    w.write_text(f"""#!/bin/bash
n=$(( $(cat "{counter}" 2>/dev/null || echo 0) + 1 ))
echo "$n" > "{counter}"
if [ "$n" -le {int(k)} ]; then
  {fail}
fi
exec "{real(tool)}" "$@"
""")
    w.chmod(0o755)
    return w


def calls(bin_dir: Path, tool: str) -> int:
    """How many times the wrapper of ``tool`` in ``bin_dir`` ran."""
    p = bin_dir / f"{tool}.calls"
    return int(p.read_text()) if p.is_file() else 0
