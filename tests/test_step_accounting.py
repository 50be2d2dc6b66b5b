"""Step accounting (issue 34) on hand-built traces whose answers are known by construction: every
host category, overlapping host threads, several streams, steps without GPU work, HIP names, a
known critical path, Python stacks, the structure figures and the savings replay. Every expected
number is worked out by hand in the comments (times are whole µs, so sums are exact)."""

from __future__ import annotations

import pytest

from ai4s_graph.tools.trace import host_sampling, host_timeline
from ai4s_graph.tools.trace.step_structure import minimal_period
from test_step_accounting_traces import TraceBuilder, every_category


def _breakdown(b: TraceBuilder, tmp_path, name="t.json", **kw):
    return host_timeline.step_breakdown(b.write(tmp_path / name), **kw)


def _path(step):
    return [(s.kind, s.category, s.name, s.start_us, s.end_us) for s in step.critical_path.segments]


# ---------------------------------------------------------------------------------- categories


def test_every_category_whole_step_and_gpu_idle(tmp_path):
    bd = _breakdown(every_category(), tmp_path)
    (st,) = bd.steps
    assert st.step == 7 and st.wall_us == 1000
    # host over the whole step: dataloader 0-100 (aten::stack inherits it); outside 100-150, 330-350,
    # 600-1000; op: aten::linear 150-200 + 210-300, aten::empty 300-305 + 325-330, aten::item 350-355 +
    # 412-420; launch 200-210 + 460-470; allocator 305-325; sync: the blocking copy 355-412;
    # optimizer 420-460 + 470-530 + 535-600; runtime_other 530-535
    assert st.host_us == {"launch": 20, "allocator": 20, "sync": 57, "dataloader": 100, "optimizer": 165,
                          "runtime_other": 5, "op": 163, "outside_ops": 470}
    assert sum(st.host_us.values()) == st.wall_us
    # GPU: K1 215-400 and K2 472-520 (computation 233), the copy 402-410 (exposed memcpy 8)
    assert st.gpu.model_dump() == {"computation_us": 233, "exposed_comm_us": 0, "exposed_memcpy_us": 8, "busy_us": 241,
                                   "idle_us": 759}
    # GPU idle 0-215, 400-402, 410-472, 520-1000: dataloader 100; outside 50 + 400; op 50 + 5 (0-215)
    # + 8 (412-420); launch 10 + 10; sync 2 + 2; optimizer 40 + 2 + 10 + 65; runtime_other 5; the
    # allocator call runs while K1 is busy
    assert st.idle_by_host_us == {"launch": 20, "allocator": 0, "sync": 4, "dataloader": 100, "optimizer": 117,
                                  "runtime_other": 5, "op": 63, "outside_ops": 450}
    assert sum(st.idle_by_host_us.values()) == st.gpu.idle_us
    top = {(a.category, a.name): a.us for a in st.idle_top}
    assert top[("outside_ops", "")] == 450
    assert top[("optimizer", "Optimizer.step#SGD.step")] == 117
    assert top[("launch", "cudaLaunchKernel")] == 10  # each launch row is per top-level op: linear's and add_'s
    s = st.structure
    # two kernel launches; the blocking copy is a sync call, made inside aten::item
    assert (s.launches, s.allocator_calls, s.sync_calls, s.sync_ops, s.optimizer_steps) == (2, 1, 1, 1, 1)
    assert (s.gpu_events, s.d2h_copies, s.d2h_bytes, s.h2d_copies) == (3, 1, 4, 0)
    assert not bd.has_python_stacks and "with_stack=True" in bd.python_stack_note


def test_every_category_critical_path_is_the_known_chain(tmp_path):
    bd = _breakdown(every_category(), tmp_path, keep_paths=True)
    (st,) = bd.steps
    # back from 1000: outside 600-1000, the optimizer and its launch and event record, aten::item's tail,
    # then the blocking copy waited for the copy (ends 410): its return 410-412, the copy 402-410, queued
    # behind K1 (gap 400-402), K1 215-400 waited for its launch (delay 200-215), then the host before it
    assert _path(st) == [
        ("host", "dataloader", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 100),
        ("host", "outside_ops", "", 100, 150),
        ("host", "op", "aten::linear", 150, 200),
        ("launch", "launch_delay", "cudaLaunchKernel", 200, 215),
        ("gpu", "gpu:computation", "void gemm()", 215, 400),
        ("gap", "gpu_gap", "", 400, 402),
        ("gpu", "gpu:memcpy", "Memcpy DtoH (Device -> Pageable)", 402, 410),
        ("sync", "sync_return", "cudaMemcpyAsync", 410, 412),
        ("host", "op", "aten::item", 412, 420),
        ("host", "optimizer", "Optimizer.step#SGD.step", 420, 460),
        ("host", "launch", "cudaLaunchKernel", 460, 470),
        ("host", "optimizer", "Optimizer.step#SGD.step", 470, 530),
        ("host", "runtime_other", "cudaEventRecord", 530, 535),
        ("host", "optimizer", "Optimizer.step#SGD.step", 535, 600),
        ("host", "outside_ops", "", 600, 1000),
    ]
    cp = st.critical_path
    assert cp.length_us == 1000 and cp.n_segments == 15
    assert cp.by_category["gpu:computation"] == 185 and cp.by_category["outside_ops"] == 450
    assert cp.top_ops[0].key == "(outside ops)" and cp.top_ops[0].us == 450
    # K1's path time counts for the op that launched it: 50 host + 15 launch delay + 185 kernel
    linear = next(p for p in cp.top_ops if p.key == "aten::linear")
    assert linear.us == 250 and linear.category == "gpu:computation"


def test_savings_replay_and_bound(tmp_path):
    acc = host_timeline.StepAccountant(tmp_path / "t.json")
    path = every_category().write(tmp_path / "t.json")
    from ai4s_graph.tools.trace.stream import feed_events

    feed_events(path, (acc.feed,))
    acc.finish()
    none = acc.saving(0, [])
    assert none.replay_us == 0 and none.upper_us == 0  # nothing removed: the replay is the measured step
    # the allocator call runs while K1 is busy: off the path, nothing saved
    alloc = acc.saving(0, ["allocator"])
    assert (alloc.replay_us, alloc.upper_us) == (0, 0)
    # outside ops: 50 + 400 on the path; the replay shifts everything after 100-150 by 50 (K1 then ends
    # at 350, the copy at 360, the blocking call returns at 362) and drops the last 400: 450 saved
    out = acc.saving(0, ["outside_ops"])
    assert out.upper_us == 450 and out.replay_us == pytest.approx(450)
    # aten::linear's host time (150-300, its launch call included): 50 on the path + its launch delay (15).
    # Replay: the host reaches the blocking copy 150 earlier (205); K1 is ready at 150 + its measured
    # latency 5, runs 155-340; the copy 342-350; the call returns at 352 instead of 412: 60 saved
    lin = acc.saving(0, ["aten::linear"])
    assert lin.upper_us == 65 and lin.replay_us == pytest.approx(60)
    # with K1 gone too: the copy runs as soon as its call starts (205-213), the call returns at 215,
    # and the rest follows: 150 of host time + 47 less waiting = 197 (the path held 50 + 15 + 185 of it)
    lin_gpu = acc.saving(0, ["aten::linear"], with_gpu_work=True)
    assert lin_gpu.upper_us == 250 and lin_gpu.replay_us == pytest.approx(197)
    assert lin_gpu.replay_us <= lin_gpu.upper_us


# ---------------------------------------------------------------------------------- threads, streams


def test_overlapping_host_threads(tmp_path):
    b = TraceBuilder()
    b.step(1, 0, 1000, tid=1)
    b.op("aten::mse_loss", 0, 100, tid=1)
    b.ann("Optimizer.step#Adam.step", 700, 200, tid=1)
    b.op("autograd::engine::evaluate_function: MmBackward0", 150, 250, tid=2)
    b.launch(200, 10, 212, 88, tid=2)
    b.op("autograd::engine::evaluate_function: AddBackward0", 450, 150, tid=2)
    b.op("autograd::engine::evaluate_function: MulBackward0", 650, 100, tid=2)
    (st,) = _breakdown(b, tmp_path).steps
    # thread 1 outside ops 100-700 while thread 2 works: thread 2's ops name 150-400, 450-600, 650-700;
    # 700-750 both in ops: the optimizer region ranks before an op
    assert st.host_us == {"launch": 10, "allocator": 0, "sync": 0, "dataloader": 0, "optimizer": 200,
                          "runtime_other": 0, "op": 100 + 50 + 190 + 150 + 50, "outside_ops": 50 + 50 + 50 + 100}
    # kernel 212-300
    assert st.gpu.idle_us == 912
    assert st.idle_by_host_us == {"launch": 10, "allocator": 0, "sync": 0, "dataloader": 0, "optimizer": 200,
                                  "runtime_other": 0, "op": 100 + 50 + 2 + 100 + 150 + 50, "outside_ops": 250}
    assert sum(st.idle_by_host_us.values()) == 912


def _streams() -> TraceBuilder:
    b = TraceBuilder()
    b.step(3, 0, 500)
    b.op("aten::mm", 5, 45)
    b.launch(10, 5, 20, 180, stream=7, kernel="gemm_a")
    b.launch(20, 5, 30, 120, stream=8, kernel="gemm_b")
    b.launch(30, 5, 100, 150, stream=9, api="cudaMemcpyAsync", kernel="Memcpy HtoD (Pinned -> Device)",
             cat="gpu_memcpy", nbytes=1 << 20)
    b.launch(40, 5, 260, 140, stream=10, kernel="ncclDevKernel_AllReduce_Sum_f32_RING_LL")
    b.launch(45, 3, 300, 50, stream=7, kernel="gemm_c")
    b.runtime("cudaStreamSynchronize", 60, 342)
    return b


def test_multiple_streams_gpu_split_and_attribution(tmp_path):
    (st,) = _breakdown(_streams(), tmp_path).steps
    # computation = [20,200) u [300,350) = 230; communication [260,400) less computation = 40 + 50;
    # memcpy [100,250) less both = [200,250) = 50; busy = [20,250) u [260,400) = 370
    assert st.gpu.model_dump() == {"computation_us": 230, "exposed_comm_us": 90, "exposed_memcpy_us": 50,
                                   "busy_us": 370, "idle_us": 130}
    assert st.host_us == {"launch": 23, "allocator": 0, "sync": 342, "dataloader": 0, "optimizer": 0,
                          "runtime_other": 0, "op": 22, "outside_ops": 5 + 10 + 98}
    # idle 0-20: outside 5, op 5 + 5, launch 5; 250-260: sync; 400-500: sync 2, outside 98
    assert st.idle_by_host_us == {"launch": 5, "allocator": 0, "sync": 12, "dataloader": 0, "optimizer": 0,
                                  "runtime_other": 0, "op": 10, "outside_ops": 103}
    assert st.structure.h2d_copies == 1 and st.structure.h2d_bytes == 1 << 20


def test_multiple_streams_critical_path_crosses_streams(tmp_path):
    (st,) = _breakdown(_streams(), tmp_path, keep_paths=True).steps
    # the sync returns after the all-reduce (ends 400); the all-reduce started at 260, after the copy on
    # stream 9 ended (250) and long after its own launch (45): a cross-stream wait; the copy waited for
    # its launch (30-35, started 100); before that the host
    assert _path(st) == [
        ("host", "outside_ops", "", 0, 5), ("host", "op", "aten::mm", 5, 10),
        ("host", "launch", "cudaLaunchKernel", 10, 15), ("host", "op", "aten::mm", 15, 20),
        ("host", "launch", "cudaLaunchKernel", 20, 25), ("host", "op", "aten::mm", 25, 30),
        ("launch", "launch_delay", "cudaMemcpyAsync", 30, 100),
        ("gpu", "gpu:memcpy", "Memcpy HtoD (Pinned -> Device)", 100, 250),
        ("gap", "gpu_wait", "", 250, 260),
        ("gpu", "gpu:communication", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 260, 400),
        ("sync", "sync_return", "cudaStreamSynchronize", 400, 402),
        ("host", "outside_ops", "", 402, 500),
    ]


def test_steps_without_gpu_work(tmp_path):
    b = every_category()
    b.step(8, 1000, 400)
    b.op("aten::copy_", 1100, 100)
    b.runtime("cudaFree", 1250, 50)
    bd = _breakdown(b, tmp_path)
    st = bd.steps[1]
    assert st.step == 8 and st.gpu.busy_us == 0 and st.gpu.idle_us == 400
    assert st.idle_by_host_us == st.host_us
    assert st.host_us["op"] == 100 and st.host_us["allocator"] == 50 and st.host_us["outside_ops"] == 250
    assert st.critical_path.length_us == 400 and st.structure.allocator_calls == 1
    assert bd.distribution.model_dump() == {"n": 2, "median_ms": 0.7, "mean_ms": 0.7, "max_ms": 1.0, "min_ms": 0.4}


def test_hip_names(tmp_path):
    b = TraceBuilder()
    b.step(2, 0, 300)
    b.op("aten::mm", 0, 100)
    b.launch(10, 20, 40, 50, api="hipLaunchKernel", kernel="Cijk_Alik_Bljk_HHS_BH_MT128x128")
    b.launch(50, 10, 90, 10, api="hipExtLaunchKernel", kernel="elementwise")
    b.runtime("hipMalloc", 100, 30)
    b.runtime("hipFree", 130, 20)
    b.runtime("hipStreamSynchronize", 150, 50)
    b.runtime("hipGetDevice", 200, 5)
    b.runtime("hipGraphLaunch", 205, 15)
    (st,) = _breakdown(b, tmp_path).steps
    assert st.host_us == {"launch": 20 + 10 + 15, "allocator": 50, "sync": 50, "dataloader": 0, "optimizer": 0,
                          "runtime_other": 5, "op": 100 - 30, "outside_ops": 300 - 220}
    assert st.structure.launches == 3 and st.structure.allocator_calls == 2 and st.structure.sync_calls == 1


# ---------------------------------------------------------------------------------- Python stacks


def _stacks() -> TraceBuilder:
    b = TraceBuilder()
    b.step(5, 0, 1000)
    b.py("train.py(10): <module>", 0, 1000)
    b.py("torch/nn/modules/module.py(1700): _call_impl", 100, 200)
    b.py("model.py(20): forward", 110, 180)
    b.op("aten::linear", 120, 160)
    b.py("train.py(30): log_metrics", 600, 300)
    b.py("<built-in method write of _io.TextIOWrapper object at 0x7f>", 650, 50)
    b.py("json/encoder.py(200): encode", 700, 100)
    b.py("site-packages/tqdm/std.py(1000): update", 800, 50)
    return b


def test_python_stacks_name_the_user_line(tmp_path):
    bd = _breakdown(_stacks(), tmp_path, keep_paths=True)
    (st,) = bd.steps
    assert bd.has_python_stacks and bd.python_stack_note == ""
    # no GPU: all idle. Outside ops 0-120 less forward's part: <module> 0-110 and 290-600 and 900-1000;
    # forward 110-120 and 280-290; log_metrics 600-900 (the built-in, json and tqdm frames are skipped);
    # the op 120-280 under forward (the torch frame is skipped)
    sites = {(s.site, s.category): s.us for s in st.idle_sites}
    assert sites == {("train.py:10 (<module>)", "outside_ops"): 110 + 310 + 100,
                     ("train.py:30 (log_metrics)", "outside_ops"): 300,
                     ("model.py:20 (forward)", "op"): 160,
                     ("model.py:20 (forward)", "outside_ops"): 20}
    assert bd.lead.category == "outside_ops" and bd.lead.site == "train.py:10 (<module>)"
    assert st.critical_path.top_sites[0].key == "train.py:10 (<module>)" and st.critical_path.top_sites[0].us == 520


def test_python_frames_of_torch_and_libraries_are_not_user_frames():
    from ai4s_graph.tools.trace.pystack import is_user_frame

    assert is_user_frame("train.py(88): main") and is_user_frame("other/helper.py(2): work")
    for name in ("torch/nn/modules/module.py(1747): _call_impl", "torch/profiler/profiler.py(1227): step",
                 "<built-in method item of Tensor object at 0x7f>", "<frozen os>(674): __getitem__",
                 "json/encoder.py(183): encode", "typing.py(359): inner",
                 "/venv/lib/python3.11/site-packages/lightning/trainer.py(10): fit", "numpy/core/fromnumeric.py(3): sum",
                 "ProfilerStep#3"):
        assert not is_user_frame(name), name


# ---------------------------------------------------------------------------------- structure


def test_repeated_batch1_sequence(tmp_path):
    b = TraceBuilder()
    b.step(1, 0, 2000)
    t = 0
    for i in range(16):  # the per-sample loop: slice the batch, run the 3-op forward on a batch of 1
        b.op("aten::select", t, 5, dims=[[16, 64], [], []])
        b.op("aten::linear", t + 10, 40, dims=[[1, 64], [32, 64], [32]])
        b.op("aten::relu", t + 55, 10, dims=[[1, 32]])
        b.op("aten::linear", t + 70, 30, dims=[[1, 32], [8, 32], [8]])
        t += 110
    b.op("aten::cat", t, 20, dims=[[1, 8]] * 16)  # a batch-1 first input, but once
    (st,) = _breakdown(b, tmp_path).steps
    r = st.structure.repeated
    assert (r.k, r.period, r.ops) == (16, 3, ["aten::linear", "aten::relu", "aten::linear"])
    assert r.shape == "[[1, 64], [32, 64], [32]]" and r.us == 16 * (40 + 10 + 30)


def test_batched_forward_has_no_repetition(tmp_path):
    b = TraceBuilder()
    b.step(1, 0, 500)
    b.op("aten::linear", 0, 40, dims=[[16, 64], [32, 64], [32]])
    b.op("aten::relu", 50, 10, dims=[[16, 32]])
    (st,) = _breakdown(b, tmp_path).steps
    assert st.structure.repeated is None


@pytest.mark.parametrize("seq,period", [([], 0), ([1], 1), ([1, 1, 1], 1), ([1, 2, 1, 2], 2), ([1, 2, 3, 1, 2], 3),
                                        ([1, 2, 3, 4], 4), ([5, 1, 5, 1, 5], 2)])
def test_minimal_period(seq, period):
    assert minimal_period(seq) == period


def test_d2h_copies_memory_events_and_counts(tmp_path):
    b = TraceBuilder()
    b.step(1, 0, 1000)
    b.ann("Optimizer.step#Adam.step", 900, 50)
    t = 10
    for i in range(4):  # per-step parameter copies to the host, each blocking (pageable)
        b.op("aten::to", t, 40)
        b.launch(t + 5, 30, t + 10, 20, api="cudaMemcpyAsync", kernel="Memcpy DtoH (Device -> Pageable)",
                 cat="gpu_memcpy", nbytes=1_000_000)
        t += 100
    for i in range(3):
        b.op("aten::item", 600 + 60 * i, 50)
        b.launch(605 + 60 * i, 5, 611 + 60 * i, 2, api="cudaMemcpyAsync", kernel="Memcpy DtoH (Device -> Pinned)",
                 cat="gpu_memcpy", nbytes=4)
        b.runtime("cudaStreamSynchronize", 612 + 60 * i, 30)
    b.memory(5, 5_000_000)
    b.memory(500, 3_000_000)
    b.memory(1500, 1_000)  # after the step: not counted
    (st,) = _breakdown(b, tmp_path).steps
    s = st.structure
    assert (s.d2h_copies, s.d2h_bytes) == (7, 4_000_012)
    assert s.sync_calls == 4 + 3 and s.sync_ops == 3 and s.optimizer_steps == 1
    assert s.device_min_allocated_bytes == 3_000_000
    assert st.host_us["sync"] == 4 * 30 + 3 * 30
    bd = _breakdown(b, tmp_path)
    assert (bd.param_bytes, bd.param_bytes_source) == (3_000_000, "memory events")  # an upper bound
    assert bd.d2h_over_param == pytest.approx(4_000_012 / 3_000_000)
    bd = _breakdown(b, tmp_path, param_bytes=4_000_000)  # the manifest's value wins
    assert (bd.param_bytes, bd.param_bytes_source) == (4_000_000, "manifest")
    assert bd.d2h_over_param == pytest.approx(1.000003) and bd.median_counts["d2h_copies"] == 7


# ---------------------------------------------------------------------------------- the verifier's path


@pytest.mark.parametrize("make", [every_category, _streams])
def test_sampler_agrees_within_its_tolerance(tmp_path, make):
    path = make().write(tmp_path / "t.json")
    bd = host_timeline.step_breakdown(path)
    sampled = host_sampling.sample_file(path, cells=1 << 14)
    rows = host_sampling.compare(bd, sampled)
    assert rows and all(r["ok"] for r in rows)
    (sm,) = sampled
    # integer boundaries on a 1000/16384 µs grid: the tolerance is counted, not assumed
    assert sm.tolerance_us == pytest.approx(sm.boundary_cells * sm.cell_us)
    assert sum(sm.host_us.values()) == pytest.approx(bd.steps[0].wall_us)


def test_bad_input_is_one_line_error(tmp_path):
    from ai4s_graph.tools.errors import InputError

    p = tmp_path / "empty.json"
    p.write_text("")
    with pytest.raises(InputError, match="empty"):
        host_timeline.step_breakdown(p)
    q = tmp_path / "notrace.json"
    q.write_text('{"traceEvents": []}')
    with pytest.raises(InputError, match="no traceEvents"):
        host_timeline.step_breakdown(q)


# ---------------------------------------------------------------------------------- CLI


def test_cli_trace_steps(tmp_path):
    import json

    from typer.testing import CliRunner

    from ai4s_graph.cli import app

    path = every_category().write(tmp_path / "t.json.gz")
    r = CliRunner().invoke(app, ["trace", "steps", str(path), "--json", "--path"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout.strip().splitlines()[-1])
    assert doc["n_steps"] == 1 and doc["steps"][0]["idle_by_host_us"]["outside_ops"] == 450
    assert len(doc["steps"][0]["critical_path"]["segments"]) == 15
    r = CliRunner().invoke(app, ["trace", "steps", str(path)])
    assert r.exit_code == 0
    assert "lead: the host spent 0.45 ms of the 1 ms step outside any recorded op" in r.stdout
    assert r.stdout.strip().splitlines()[-1].startswith("STATUS=ok")
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [')
    r = CliRunner().invoke(app, ["trace", "steps", str(bad)])
    assert r.exit_code == 2 and r.stdout.strip().splitlines()[-1].startswith("STATUS=fail")


def test_lead_sentence_has_the_numbers(tmp_path):
    """The issue's example by construction: 180 blocking device-to-host copies of the parameters
    (1.83 MB each, 329 MB), then 412 ms of Python outside every op, in a 520 ms step."""
    b = TraceBuilder()
    b.step(1, 0, 520_000)
    t = 1000
    for i in range(180):
        b.op("aten::to", t, 500)
        b.launch(t + 10, 480, t + 100, 380, api="cudaMemcpyAsync", kernel="Memcpy DtoH (Device -> Pageable)",
                 cat="gpu_memcpy", nbytes=1_827_778)
        t += 500
    b.op("aten::mul", t, 1000)  # 91 000 - 92 000
    b.launch(t + 10, 10, t + 30, 5000)
    (st,) = (bd := _breakdown(b, tmp_path)).steps
    lead = bd.lead
    # outside ops: 0-1000, 92 000-520 000 = 429 000 of which the GPU (kernel 91 030-96 030) covers 4030
    assert lead.category == "outside_ops" and lead.us == 1000 + 428_000 - 4030
    assert lead.context["d2h_copies_per_step"] == 180 and lead.context["d2h_mb_per_step"] == pytest.approx(329.00004)
    assert lead.preceded_by == "op aten::mul"
    assert lead.text == ("the host spent 425 ms of the 520 ms step outside any recorded op while the GPU was idle; "
                         "the step holds 180 device-to-host copies of 329 MB; its longest stretch comes right after "
                         "op aten::mul")
