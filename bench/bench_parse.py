"""Where ``trace timeline``'s time goes, part by part, in one process (issue 29): the parse's stages
and the engine's, each repeated and interleaved, as main-thread CPU (``time.thread_time``), process
CPU (every thread: the reader thread's gunzip and JSON bounds run beside the main thread) and wall.

    python bench/bench_parse.py /work/bigtraces/repl-176mb.json.gz --repeat 3 [--pieces 65536,262144,1048576]

Stages (each a full pass over the file):

- ``gunzip``: the decompression alone (1 MiB reads);
- ``gunzip+bounds``: the same through :class:`~ai4s_graph.tools.jsonguard.GuardedReader`;
- ``parse``: :func:`~ai4s_graph.tools.trace.stream.iter_event_batches` with the engine's fields
  (``struct``), every event touched once;
- ``scan``: :func:`~ai4s_graph.tools.trace.stream.scan_trace` (the parse and the engine's loop);
- ``analyze``: :func:`~ai4s_graph.tools.trace.engine.analyze_with_tables` (what ``trace timeline
  --json`` runs after its imports).

``--pieces`` repeats ``parse`` and ``scan`` at each piece size (:data:`.fastscan.PIECE_BYTES`).
Prints one table (median of the repeats) and, with ``--json F``, writes every sample. A
per-stage ratio between two hosts (this 2-core machine and the 16-core device) says whether a
host runs everything slower or only the allocation-heavy stages (the decode, the loop).
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from ai4s_graph.tools.jsonguard import GuardedReader  # noqa: E402
from ai4s_graph.tools.trace import engine, fastscan, stream  # noqa: E402


def _stages(path: str) -> dict[str, Callable[[], object]]:
    def gunzip() -> None:
        with gzip.open(path, "rb") as fh:
            while fh.read(1 << 20):
                pass

    def bounds() -> None:
        with open(path, "rb") as raw:
            fh = GuardedReader(gzip.GzipFile(fileobj=raw), Path(path).name)
            while fh.read(1 << 20):
                pass

    def parse() -> int:
        n = 0
        for batch in stream.iter_event_batches(path, fields="struct"):
            for _ev in batch:
                n += 1
        return n

    return {"gunzip": gunzip, "gunzip+bounds": bounds, "parse": parse,
            "scan": lambda: stream.scan_trace(path), "analyze": lambda: engine.analyze_with_tables(path)}


def measure(path: str, repeat: int, pieces: list[int]) -> list[dict]:
    """Samples ``{stage, piece, thread_s, cpu_s, wall_s}``: every stage ``repeat`` times, the order
    of the stages reversed on every other round (a shared machine's load drifts)."""
    st = _stages(path)
    plan = [(k, fastscan.PIECE_BYTES) for k in ("gunzip", "gunzip+bounds")]
    plan += [(k, p) for p in pieces for k in ("parse", "scan")] + [("analyze", fastscan.PIECE_BYTES)]
    default, out = fastscan.PIECE_BYTES, []
    for r in range(repeat):
        for k, p in (plan if r % 2 == 0 else plan[::-1]):
            fastscan.PIECE_BYTES = p
            t0, c0, w0 = time.thread_time(), time.process_time(), time.perf_counter()
            st[k]()
            out.append({"stage": k, "piece": p, "thread_s": time.thread_time() - t0,
                        "cpu_s": time.process_time() - c0, "wall_s": time.perf_counter() - w0})
    fastscan.PIECE_BYTES = default
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--pieces", default=str(fastscan.PIECE_BYTES),
                    help="comma-separated piece sizes in bytes for the parse and scan stages")
    ap.add_argument("--json", type=Path, default=None, help="write every sample here")
    a = ap.parse_args()
    samples = measure(a.trace, a.repeat, [int(x) for x in a.pieces.split(",")])
    print(f"{a.trace}: median of {a.repeat} (s)")
    print(f"{'stage':<14} {'piece KiB':>9} {'main CPU':>9} {'all CPU':>9} {'wall':>8}")
    seen: dict[tuple, list[dict]] = {}
    for s in samples:
        seen.setdefault((s["stage"], s["piece"]), []).append(s)
    for (k, p), v in seen.items():
        med = {f: statistics.median(x[f] for x in v) for f in ("thread_s", "cpu_s", "wall_s")}
        print(f"{k:<14} {p >> 10:>9} {med['thread_s']:>9.3f} {med['cpu_s']:>9.3f} {med['wall_s']:>8.3f}")
    if a.json:
        a.json.write_text(json.dumps(samples, indent=1))


if __name__ == "__main__":
    main()
