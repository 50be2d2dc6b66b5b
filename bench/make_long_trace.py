"""Make long kineto traces from a real one by replicating its profiled steps, for the benchmark.

The profiled steps of a real trace (default: the bundled example 92001, a message-passing GNN on one
NVIDIA H200: 3 steps, 564 kernels a step, 4 MB of JSON) are written back to back until the file
reaches the requested size: copy k is shifted by k x the trace's span, its correlation / External
ids, flow ids and ``Ev Idx`` are offset so that every link stays unique (fresh ids), and its
ProfilerStep numbers are renumbered. Metadata (``ph: M``), instant events and the profiler's span
are written once (the span stretched over every copy). 44 copies of 92001 give the shape of the long
real profile of issue 12 (130 steps, ~73 k kernels, 176 MB of JSON: ``bench/README-long-trace.md``).

The text is written the way kineto writes it (one event per ``{ ... }`` block, ``},\\n  {`` between
events, ``ts``/``dur`` with three decimals), gzip-compressed, streamed (one copy in memory at a time),
into a scratch folder, never into the repository. A set of ranks gets ``distributedInfo`` (rank,
world_size) per file and a per-rank shift of a few µs, so no two files have the same bytes (the trace
cache keys on content).

    python bench/make_long_trace.py --size-mb 176 --out /work/bigtraces/long_rank0.json.gz
    python bench/make_long_trace.py --size-mb 1000 --out /work/bigtraces/1gb_rank0.json.gz
    python bench/make_long_trace.py --size-mb 30 --ranks 8 --out /work/bigtraces/r8
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
from pathlib import Path
from typing import Any, BinaryIO

import orjson

REPO = Path(__file__).resolve().parent.parent
DEFAULT_SOURCE = REPO / "examples" / "perf-runs" / "92001" / "traces" / "trace_rank0.json.gz"
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
#: args that are ids unique per event (offset per copy so that links stay one-to-one)
_ID_ARGS = ("correlation", "External id", "Ev Idx")


def _load(source: Path) -> dict[str, Any]:
    with open(source, "rb") as fh:
        gz = fh.read(2) == b"\x1f\x8b"
    with (gzip.open(source, "rb") if gz else open(source, "rb")) as fh:
        return orjson.loads(fh.read())


def _num(v: Any) -> bytes:
    """A ts / dur as kineto writes it: three decimals for a float, as is for an int."""
    return b"%.3f" % v if type(v) is float else orjson.dumps(v)


def event_text(ev: dict[str, Any]) -> bytes:
    """One event in kineto's layout (``{`` on its own line, args on their own lines, no trailing comma)."""
    top = [b'"%s": %s' % (orjson.dumps(k)[1:-1], _num(v) if k in ("ts", "dur") else orjson.dumps(v))
           for k, v in ev.items() if k != "args"]
    out = b"  {\n    " + b", ".join(top)
    if "args" in ev:
        args = ev["args"]
        inner = b", ".join(b"%s: %s" % (orjson.dumps(k), orjson.dumps(v)) for k, v in args.items()) \
            if isinstance(args, dict) else orjson.dumps(args)
        out += b',\n    "args": {\n      ' + inner + b"\n    }" if isinstance(args, dict) \
            else b',\n    "args": ' + inner
    return out + b"\n  }"


def _strides(events: list[dict[str, Any]]) -> dict[str, float]:
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    t0 = min(float(e["ts"]) for e in timed)
    t1 = max(float(e["ts"]) + float(e.get("dur") or 0.0) for e in timed)
    ids = [e["args"].get(k) for e in events if isinstance(e.get("args"), dict) for k in _ID_ARGS]
    flows = [e.get("id") for e in events if isinstance(e.get("id"), (int, float))]
    steps = sorted({int(m.group(1)) for e in events if (m := _STEP.match(str(e.get("name", ""))))})
    return {"span": (t1 - t0) + 1.0,
            "id": max([int(i) for i in ids if isinstance(i, (int, float))] + [0]) + 1,
            "flow": max([int(i) for i in flows] + [0]) + 1,
            "step": (max(steps) - min(steps) + 1) if steps else 0}


def _copy(e: dict[str, Any], k: int, st: dict[str, float], shift_us: float) -> dict[str, Any]:
    e2 = dict(e)
    if isinstance(e.get("ts"), (int, float)):
        e2["ts"] = float(e["ts"]) + k * st["span"] + shift_us
    a = e.get("args")
    if k and isinstance(a, dict):
        a2 = dict(a)
        for key in _ID_ARGS:
            if isinstance(a2.get(key), int) and a2[key] >= 0:
                a2[key] = a2[key] + k * st["id"]
        e2["args"] = a2
    if k and isinstance(e.get("id"), int):
        e2["id"] = e["id"] + k * st["flow"]
    m = _STEP.match(str(e.get("name", "")))
    if k and m:
        e2["name"] = f"ProfilerStep#{int(m.group(1)) + k * st['step']}"
    return e2


def _once(e: dict[str, Any]) -> bool:
    """Written once, not per copy: metadata, instant events, the profiler's own span."""
    return e.get("ph") in ("M", "i", "I") or e.get("cat") == "Trace"


def write_trace(data: dict[str, Any], fh: BinaryIO, *, target_bytes: int, rank: int | None = None,
                world_size: int | None = None, shift_us: float = 0.0) -> dict[str, Any]:
    """Write the replicated trace (uncompressed JSON text) to ``fh``; returns ``{"bytes", "copies",
    "events", "steps"}``. ``target_bytes``: JSON bytes to reach (at least one copy is written)."""
    events = data["traceEvents"]
    st = _strides(events)
    rep = [e for e in events if not _once(e)]
    once = [e for e in events if _once(e)]
    one = sum(len(event_text(e)) + 2 for e in rep)
    copies = max(1, round((target_bytes - sum(len(event_text(e)) + 2 for e in once)) / one))
    header = {k: v for k, v in data.items() if k != "traceEvents"}
    trail = {k: header.pop(k) for k in ("traceName",) if k in header}
    if rank is not None:
        header = {"distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world_size}, **header}
    head = orjson.dumps(header, option=orjson.OPT_INDENT_2)[:-2] + b',\n  "traceEvents": [\n'
    n, written, first = 0, 0, True

    def put(e: dict[str, Any]) -> None:
        nonlocal n, written, first
        b = (b"" if first else b",\n") + event_text(e)
        fh.write(b)
        written += len(b)
        n += 1
        first = False

    fh.write(head)
    written += len(head)
    for k in range(copies):
        for e in rep:
            put(_copy(e, k, st, shift_us))
    for e in once:
        e2 = dict(e)
        if e.get("cat") == "Trace" and isinstance(e.get("dur"), (int, float)):
            e2["dur"] = float(e["dur"]) + (copies - 1) * st["span"]
        if e.get("name") == "Record Window End" and isinstance(e.get("ts"), (int, float)):
            e2["ts"] = float(e["ts"]) + (copies - 1) * st["span"]
        if isinstance(e2.get("ts"), (int, float)):
            e2["ts"] = float(e2["ts"]) + shift_us
        put(e2)
    tail = b"\n  ]" + b"".join(b',\n  %s: %s' % (orjson.dumps(k), orjson.dumps(v)) for k, v in trail.items()) + b"\n}\n"
    fh.write(tail)
    written += len(tail)
    n_steps = len({e["name"] for e in rep if _STEP.match(str(e.get("name", "")))}) * copies
    return {"bytes": written, "copies": copies, "events": n, "steps": n_steps}


def make(out: str | Path, *, size_mb: float, source: str | Path = DEFAULT_SOURCE, rank: int | None = None,
         world_size: int | None = None, shift_us: float = 0.0, level: int = 6) -> dict[str, Any]:
    """Write one replicated trace to ``out`` (gzip when it ends in ``.gz``); returns write_trace's dict
    plus ``path``. ``size_mb``: MB (1e6 B) of JSON text."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    data = _load(Path(source))
    tmp = out.with_name(out.name + ".part")
    with (gzip.open(tmp, "wb", compresslevel=level) if out.name.endswith(".gz") else open(tmp, "wb")) as fh:
        info = write_trace(data, fh, target_bytes=int(size_mb * 1e6), rank=rank, world_size=world_size,
                           shift_us=shift_us)
    tmp.replace(out)
    return {"path": str(out), **info}


def make_set(out_dir: str | Path, *, size_mb: float, ranks: int, source: str | Path = DEFAULT_SOURCE) -> dict[int, str]:
    """``trace_rank{r}.json.gz`` for r in 0..ranks-1 in ``out_dir`` (kept when ``set.json`` says the same
    parameters made them); returns ``{rank: path}``."""
    out = Path(out_dir)
    meta = out / "set.json"
    want = {"size_mb": size_mb, "ranks": ranks, "source": str(Path(source).resolve())}
    if meta.is_file() and json.loads(meta.read_text()).get("params") == want:
        files = {int(k): v for k, v in json.loads(meta.read_text())["files"].items()}
        if all(Path(p).is_file() for p in files.values()):
            return files
    files = {r: make(out / f"trace_rank{r}.json.gz", size_mb=size_mb, source=source, rank=r, world_size=ranks,
                     shift_us=3.0 * r)["path"] for r in range(ranks)}
    meta.write_text(json.dumps({"params": want, "files": files}))
    return files


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=float, required=True, help="MB (1e6 B) of JSON per trace")
    ap.add_argument("--out", required=True, help="a .json(.gz) file, or a folder with --ranks")
    ap.add_argument("--ranks", type=int, default=0, help="write a set of this many rank traces into --out")
    ap.add_argument("--source", default=str(DEFAULT_SOURCE))
    a = ap.parse_args()
    if a.ranks:
        files = make_set(a.out, size_mb=a.size_mb, ranks=a.ranks, source=a.source)
        print(f"{len(files)} rank traces in {a.out}")
    else:
        info = make(a.out, size_mb=a.size_mb, source=a.source)
        print(json.dumps(info))


if __name__ == "__main__":
    main()
