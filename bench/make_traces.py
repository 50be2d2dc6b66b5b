"""Make synthetic-but-realistic multi-rank kineto traces from one real trace, for the benchmark.

The events of a real trace (default: HolisticTraceAnalysis's ``nccl_data.json.gz``, a 2-GPU
NCCL training trace with collective metadata on its kernels) are replicated back to back until
the file reaches the requested size: copy k is shifted by k x (trace span + 1 ms), its
correlation / External ids and flow ids are offset so links stay unique, ProfilerStep numbers are
renumbered. Each rank gets its own ``distributedInfo`` (rank, world_size) and a small seeded
per-collective jitter; one rank can be made a straggler: its communication kernels start
``delay_us`` later while the other ranks' kernels start on time and last ``delay_us`` longer
(they wait for it), which is how a late rank shows in real NCCL traces.

Files are written as plain ``.json`` (streamed with orjson, never held in memory) into a scratch
directory, never into the repository. Usage::

    python bench/make_traces.py --size-mb 100 --ranks 8 --out /tmp/ai4s-bench/100mb-8r
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import re
from pathlib import Path
from typing import Any

import orjson

DEFAULT_SOURCE = Path(__file__).resolve().parent.parent.parent / "shared" / "data" / "traces" / "hta" / "nccl_data.json.gz"
_COMM = re.compile(r"nccl|rccl", re.IGNORECASE)
_STEP = re.compile(r"^ProfilerStep#(\d+)$")


def _load(source: Path) -> dict[str, Any]:
    opener = gzip.open if source.read_bytes()[:2] == b"\x1f\x8b" else open
    with opener(source, "rb") as fh:
        return orjson.loads(fh.read())


def make_rank_trace(source_data: dict[str, Any], out: Path, *, rank: int, world_size: int, target_bytes: int,
                    straggler_rank: int | None = None, delay_us: float = 0.0, jitter_us: float = 20.0,
                    seed: int = 0) -> dict[str, Any]:
    """Write one rank's trace of about ``target_bytes`` (at least one copy) to ``out``.

    Returns ``{"path", "bytes", "copies", "events"}``."""
    events = source_data["traceEvents"]
    timed = [e for e in events if "ts" in e]
    untimed = [e for e in events if "ts" not in e]
    t0 = min(float(e["ts"]) for e in timed)
    t1 = max(float(e["ts"]) + float(e.get("dur") or 0.0) for e in timed)
    span = (t1 - t0) + 1000.0
    ids = [e.get("args", {}).get(k) for e in timed for k in ("correlation", "External id")]
    id_stride = max([int(i) for i in ids if isinstance(i, (int, float))] + [0]) + 1
    flow_ids = [e.get("id") for e in timed if isinstance(e.get("id"), (int, float))]
    flow_stride = max([int(i) for i in flow_ids] + [0]) + 1
    steps = sorted({int(m.group(1)) for e in timed if (m := _STEP.match(str(e.get("name", ""))))})
    step_stride = (max(steps) - min(steps) + 1) if steps else 0
    rng = random.Random(seed * 7919 + rank)
    header = {k: v for k, v in source_data.items() if k != "traceEvents"}
    dist = dict(header.get("distributedInfo") or {})
    dist.update({"rank": rank, "world_size": world_size})
    header["distributedInfo"] = dist
    head = orjson.dumps(header)[:-1] + b',"traceEvents":['
    out.parent.mkdir(parents=True, exist_ok=True)
    written, copies, n = 0, 0, 0
    n_copies = None  # decided after the first copy: the number of copies closest to target_bytes
    with open(out, "wb") as fh:
        fh.write(head)
        first = True
        for e in untimed:
            fh.write(orjson.dumps(e) if first else b"," + orjson.dumps(e))
            first = False
        while n_copies is None or copies < n_copies:
            shift = copies * span
            for e in timed:
                e2 = dict(e)
                e2["ts"] = float(e["ts"]) + shift
                a = e.get("args")
                if a:
                    a2 = dict(a)
                    for k in ("correlation", "External id"):
                        if isinstance(a2.get(k), (int, float)) and a2[k] >= 0:
                            a2[k] = int(a2[k]) + copies * id_stride
                    e2["args"] = a2
                if isinstance(e.get("id"), (int, float)):
                    e2["id"] = int(e["id"]) + copies * flow_stride
                m = _STEP.match(str(e.get("name", "")))
                if m:
                    e2["name"] = f"ProfilerStep#{int(m.group(1)) + copies * step_stride}"
                if e.get("cat") == "kernel" and _COMM.search(str(e.get("name", ""))):
                    j = rng.uniform(0.0, jitter_us)
                    if straggler_rank is not None and rank == straggler_rank:
                        e2["ts"] += delay_us + j
                    else:
                        e2["ts"] += j
                        e2["dur"] = float(e.get("dur") or 0.0) + (delay_us if straggler_rank is not None else 0.0)
                b = orjson.dumps(e2)
                fh.write(b if first else b"," + b)
                first = False
                written += len(b) + 1
                n += 1
            copies += 1
            if n_copies is None:
                n_copies = max(1, round(target_bytes / max(written, 1)))
        tail = {k: header[k] for k in ("traceName", "displayTimeUnit", "baseTimeNanoseconds") if k in header}
        fh.write(b"]" + (b"," + orjson.dumps(tail)[1:] if tail else b"}"))
    return {"path": str(out), "bytes": out.stat().st_size, "copies": copies, "events": n + len(untimed)}


def make_set(out_dir: str | os.PathLike, *, size_mb: float, ranks: int, source: str | os.PathLike = DEFAULT_SOURCE,
             straggler_rank: int | None = None, delay_us: float = 0.0, seed: int = 0) -> dict[int, str]:
    """Write ``rank{r}_trace.json`` for r in 0..ranks-1 into ``out_dir``; returns ``{rank: path}``.
    A file already there with the right size class is reused (the set is deterministic)."""
    src = Path(source)
    data = _load(src)
    out = Path(out_dir)
    meta = out / "set.json"
    want = {"size_mb": size_mb, "ranks": ranks, "source": str(src.resolve()), "straggler_rank": straggler_rank,
            "delay_us": delay_us, "seed": seed}
    if meta.is_file() and json.loads(meta.read_text()).get("params") == want:
        return {int(k): v for k, v in json.loads(meta.read_text())["files"].items()}
    files = {}
    for r in range(ranks):
        info = make_rank_trace(data, out / f"rank{r}_trace.json", rank=r, world_size=ranks,
                               target_bytes=int(size_mb * 1e6), straggler_rank=straggler_rank, delay_us=delay_us,
                               seed=seed)
        files[r] = info["path"]
    meta.write_text(json.dumps({"params": want, "files": files}))
    return files


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-mb", type=float, required=True, help="target size of each rank's trace (MB = 1e6 B)")
    ap.add_argument("--ranks", type=int, default=1)
    ap.add_argument("--out", required=True, help="scratch directory (not in the repository)")
    ap.add_argument("--source", default=str(DEFAULT_SOURCE))
    ap.add_argument("--straggler-rank", type=int, default=None)
    ap.add_argument("--delay-us", type=float, default=0.0)
    a = ap.parse_args()
    files = make_set(a.out, size_mb=a.size_mb, ranks=a.ranks, source=a.source, straggler_rank=a.straggler_rank,
                     delay_us=a.delay_us)
    total = sum(Path(p).stat().st_size for p in files.values())
    print(f"wrote {len(files)} traces, {total / 1e6:.1f} MB in all, into {a.out}")


if __name__ == "__main__":
    main()
