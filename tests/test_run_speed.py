"""Issue 29, the ``run`` side: what made ``run`` wait or work twice, fixed without moving a result.

- one rank-trace process pool however many LangGraph threads ask for it at once (the race made one
  pool per thread: 8-12 workers on 2 cores, 1.6 GB);
- the telemetry analyst is sent before the rank traces (LangGraph runs a superstep's tasks on
  ``cores + 4`` threads in the order sent: last, it waited for a rank to finish);
- the verifier's kernel time by name asks the causes once per distinct name;
- the differential check: the bundled examples give the same report (class, claims with their
  evidence and verdicts, causes, levers, figures, summary) with the ranks analysed one at a time
  and concurrently in the pool (``bench/run_digest.py`` compares two checkouts the same way).
"""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from ai4s_graph.graph.analysis import graph as analysis_graph
from ai4s_graph.tools.trace import onepass, workers

REPO = Path(__file__).resolve().parents[1]


def test_threads_asking_at_once_share_one_pool():
    got: list[object] = []
    barrier = threading.Barrier(6)

    def ask() -> None:
        barrier.wait()
        got.append(workers.pool(3))

    threads = [threading.Thread(target=ask) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert len(got) == 6 and len({id(p) for p in got}) == 1
        assert workers.pool(3) is got[0]  # asked again at the same size: the same pool
    finally:
        got[0].shutdown(wait=True)
        workers._POOL, workers._POOL_SIZE = None, 0


def test_the_telemetry_analyst_is_sent_before_the_rank_traces(monkeypatch):
    monkeypatch.setattr(analysis_graph, "fan_out_ranks",
                        lambda state: [SimpleNamespace(node="trace_rank", arg=i) for i in range(8)])
    sends = analysis_graph._analyze({"request": None})
    assert [s.node for s in sends] == ["telemetry_analyst"] + ["trace_rank"] * 8


def test_kernel_time_by_name_asks_once_per_name_and_sums_by_hand():
    gpu = [SimpleNamespace(cat="kernel", name="a", dur=2.0), SimpleNamespace(cat="kernel", name="b", dur=5.0),
           SimpleNamespace(cat="kernel", name="a", dur=3.0), SimpleNamespace(cat="gpu_memcpy", name="c", dur=7.0),
           SimpleNamespace(cat="cpu_op", name="a", dur=100.0), SimpleNamespace(cat="kernel", name="a", dur=0.5)]
    asked: list[str] = []

    def wanted(n: str) -> bool:
        asked.append(n)
        return n != "b"

    out = onepass.kernel_time_by_name(SimpleNamespace(gpu=gpu), wanted)
    assert out == {"a": 5.5, "c": 7.0}  # 2 + 3 + 0.5 (the cpu_op is not GPU time); b not wanted
    assert sorted(asked) == ["a", "b", "c"]


def _digest_of(example: str, workers_n: int, tmp: Path) -> dict:
    from ai4s_graph.cli.run import execute
    from ai4s_graph.graph.analysis.configuration import RunRequest

    import sys
    sys.path.insert(0, str(REPO / "bench"))
    import run_digest

    run_dir = REPO / "examples" / "perf-runs" / example
    out = tmp / f"{example}-w{workers_n}"
    req = RunRequest(jobid=example, perf_run=str(run_dir), out_dir=str(out), llm="none", workers=workers_n)
    final = execute(req, checkpoint=str(tmp / f"ck-{example}-{workers_n}.sqlite"))
    rep = final["report"].model_dump(mode="json")
    return run_digest.digest(rep, ((str(out), "<out>"),))


@pytest.mark.vm
@pytest.mark.parametrize("example", ["92001", "93001", "93002", "93003", "93004", "93005"])
def test_the_report_is_the_same_with_the_ranks_one_at_a_time_or_concurrent(example, tmp_path):
    one = _digest_of(example, 1, tmp_path)
    two = _digest_of(example, 2, tmp_path)
    workers._POOL = None if workers._POOL is None else workers._POOL.shutdown(wait=True)
    workers._POOL_SIZE = 0
    assert one["bottleneck"]["klass"] and one["claims"]
    assert one == two
