"""The result of ``ai4s-graph run`` reduced to what a speed change must not move (issue 29): the
bottleneck class (critical rank, straggler, confidence), every claim (id, metric, value, unit,
verdict), the named causes and the levers, and the executive summary. Two checkouts that give the same
digest on a run directory gave the same verdict, claims, cause and numbers.

    python bench/run_digest.py examples/perf-runs/* bench/accuracy/cases/<name> ... --out digest.json
    python bench/run_digest.py --compare before.json after.json

Each run directory runs in a fresh child (``python -m ai4s_graph.cli run --llm none``, the checkout
of ``PYTHONPATH``) into a scratch folder. ``--compare`` prints every difference and exits 1 when
there is one.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

#: Report keys that say where the files went (the plots' and the annotated trace's paths, the LLM's
#: token usage), not what the run found.
VOLATILE = ("plots", "annotated_trace", "usage")
#: The VictoriaMetrics a run starts on loopback listens on a free port of that run.
_LOOPBACK = re.compile(r"http://127\.0\.0\.1:\d+")


def _clean(v: Any, subs: tuple[tuple[str, str], ...]) -> Any:
    """``v`` with every string's folders of ``subs`` replaced by their placeholders (any depth)."""
    if isinstance(v, dict):
        return {k: _clean(x, subs) for k, x in v.items()}
    if isinstance(v, list):
        return [_clean(x, subs) for x in v]
    if isinstance(v, str):
        for old, new in subs:
            v = v.replace(old, new)
        return _LOOPBACK.sub("<tsdb>", v)
    return v


def digest(report: dict[str, Any], subs: tuple[tuple[str, str], ...] = ()) -> dict[str, Any]:
    """A ``report.json`` (a dict) without :data:`VOLATILE`, its folders of ``subs`` (``(path,
    placeholder)``) replaced: the class, every claim with its evidence and verdict, the causes, the
    levers, the figures, the summary, the STATUS lines."""
    return _clean({k: v for k, v in report.items() if k not in VOLATILE}, subs)


def run_one(run_dir: Path, scratch: Path) -> dict[str, Any]:
    """``ai4s-graph run`` on ``run_dir`` (its manifest's job id) into ``scratch``; the digest of its
    report.json, or ``{"error": ...}``."""
    man = json.loads((run_dir / "manifest.json").read_text())
    env = dict(os.environ, AI4S_STATE_DIR=str(scratch / "state"))
    env.pop("AI4S_TRACE_CACHE", None)
    p = subprocess.run([sys.executable, "-m", "ai4s_graph.cli", "run", "--job", str(man["jobid"]), "--perf-run",
                        str(run_dir), "--out", str(scratch / "out"), "--checkpoint", str(scratch / "ck.sqlite"),
                        "--llm", "none", "-q"], env=env, capture_output=True, text=True, timeout=900)
    rep = scratch / "out" / "report.json"
    if not rep.is_file():
        return {"error": (p.stdout + p.stderr).strip().splitlines()[-1:] or ["no report"]}
    return digest(json.loads(rep.read_text()), ((str(scratch / "out"), "<out>"), (str(run_dir), "<run>")))


def compare(a: Any, b: Any, where: str = "") -> list[str]:
    """Every place where ``a`` and ``b`` differ (``where: a != b``)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            out += compare(a.get(k), b.get(k), f"{where}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in compare(x, y, f"{where}[{i}]")]
    return [] if a == b else [f"{where}: {json.dumps(a)[:200]} != {json.dumps(b)[:200]}"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="*", type=Path)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--compare", nargs=2, type=Path)
    a = ap.parse_args()
    if a.compare:
        x, y = (_clean(json.loads(p.read_text()), ()) for p in a.compare)
        diffs = compare(x, y)
        print("\n".join(diffs) or f"identical: {len(x)} runs")
        return 1 if diffs else 0
    res = {}
    with tempfile.TemporaryDirectory(prefix="ai4s-digest-") as tmp:
        for i, r in enumerate(a.runs):
            res[r.name] = run_one(r.resolve(), Path(tmp) / str(i))
            print(f"{r.name}: {res[r.name].get('bottleneck', res[r.name].get('error'))}", file=sys.stderr)
    text = json.dumps(res, indent=1, sort_keys=True, default=str)
    if a.out:
        a.out.write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
