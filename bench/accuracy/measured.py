"""What the bundled runs showed, case by case: the truth of :mod:`cases` completed from the
measurement (stdlib only, like ``cases.py``).

Each entry of :data:`MEASURED` is applied to its case by ``cases.py``: ``note`` is appended to the
truth's notes (the numbers an engineer reads off the run: the step ratio against the control, the
cause's signature in the trace, log or telemetry); ``klass`` replaces the construction's class where
the run showed another; ``present`` (controls) names the causes of :data:`cases.CAUSES` the control
does have by measurement (a report naming one of them is not wrong); ``score_cause: False`` keeps a
case whose injected cause had no measurable effect as a run, scored for its class but not for the
cause or the lever. The figures themselves are in each bundled ``truth.json`` (``measured``, written
by ``bundle.py`` from the run as returned), so every number here can be checked there.

How the class was read: by the project's rules (``graph/analysis/diagnosis.py``: computing
>= BUSY_COMPUTE_PCT 80% -> compute-bound, idle >= IDLE_DISPATCH_PCT 40% -> dispatch-bound, the
DataLoader >= 30% of the step with the GPU idle -> data-loader-bound) over the profiled window, and,
where the profiler stretched the step (profiled / unprofiled step > REPR_STEP_RATIO 1.10), over the
unprofiled steady step: GPU time per profiled step / the log's median step outside the profiler's
steps (issue 24 point 2: a profiler-stretched but GPU-bound run keeps its class). "Borderline" marks
a class whose figure lies within BORDERLINE_MARGIN (10%) of its threshold, or between the two
thresholds and nearer this one: the class is then the nearest, said with its numbers.

Effect: a cause counts as measurable when the case's steady median step, or its steady mean (a
stall every epoch moves the mean, not the median), is >= 1.10x the control's (twice seed 000
lesson 9's +-5% run-to-run band, the band ``diagnosis.REPR_STEP_RATIO`` uses).
"""

from __future__ import annotations

MEASURED_ON = {
    "new": "2026-12-01, one NVIDIA H200 (driver 580.159.04, 700 W, 1980 MHz), torch 2.11.0+cu130, cuDNN 9.19; "
           "generate.py in two calls (the second ran the 19 cases the first call's budget skipped)",
    "first": "2026-11-30, an nvidia-h200-x2 lease (2 H200, NV18), torch 2.11.0+cu130",
}
"""When and where the bundled runs were made (the README's table repeats it per case)."""

EFFECT_RATIO = 1.10
"""Case / control step ratio at and above which the injected cause had an effect (see the module
docstring: twice lesson 9's +-5% band)."""

M = "measured 2026-12-01 (H200): "

MEASURED: dict[str, dict] = {
    # ---------------------------------------------------------------- issue 24: the causes one GPU can show
    "93111": {"note": M + "4.85x the control's median step (75.7 vs 15.6 ms); GPU computing 98.0% of the window, "
                          "GEMM 94% of kernel time in FFMA kernels (sm80_xmma_gemm_f32f32_f32f32, cutlass simt sgemm) "
                          "where 93112 runs sm90_xmma_gemm_f32f32_tf32f32"},
    "93113": {"note": M + "5.61x (94.3 vs 16.8 ms); 376 aten::isnan and 378 cudaStreamSynchronize per profiled step "
                          "(93120: 0 and 2); GPU idle 88.3%, the host's idle time in the ops' CPU side (66.5 ms a step)"},
    "93114": {"note": M + "1.54x median (99.1 vs 64.2 ms), 1.30x over the unprofiled steps (81.8 vs 63.1 ms); GPU "
                          "computation 63.7 vs 49.6 ms a step (+28%: T17's 20-30%), aten::linear 196 vs 100 a step. "
                          "Class borderline compute-bound: GPU computing 77.9% of the unprofiled step (80% rule, "
                          "idle 21%), 63.4% of the profiled window (stretch 1.26)"},
    "93116": {"note": M + "2.14x (23.8 vs 11.1 ms); Memcpy HtoD (Pageable -> Device) 77.1 MB a step, exposed memcpy "
                          "52.3% of the window (93117: the same 77.1 MB from pinned memory, 12.8% exposed); GPU "
                          "computing 38.3%, idle 9.4%: no rule of the trace fires, the class is T6's (input pipeline)"},
    "93118": {"note": M + "1.32x (14.7 vs 11.1 ms); 17 nchwToNhwc + 8 nhwcToNchw kernels a step, 4.6 of the 12.5 ms "
                          "of computation (93117: none); GPU computing 84.8%"},
    "93119": {"score_cause": False,
              "note": M + "NO measurable effect: 1.01x (11.2 vs 11.1 ms median, 0.93x mean); cuDNN's heuristic picked "
                          "2 other convolution kernels than 93117's benchmark (convolve_common_engine_float_NHWC "
                          "332 us a step where the benchmark's tensorop fprop takes 157 us), 1.4% more kernel time "
                          "a step: kept as a run, scored for its class (computing 81.6%), not for the cause or the "
                          "lever"},
    "93121": {"note": M + "4.99x (299.4 vs 60.0 ms); 16 420 kernels a step (93122: 265), mean kernel 1.1 us; of the "
                          "306 ms profiled step the GPU idles 94%, the host in Optimizer.step (156 ms) and in launches "
                          "(94 ms)"},
    "93123": {"note": M + "2.26x (135.6 vs 60.0 ms); 2 052 cudaStreamSynchronize and 2 050 norm reductions a step "
                          "(93122: 4 syncs); largest idle attribution aten::linalg_vector_norm, 82.5 ms of a 239 ms "
                          "profiled step; GPU idle 96.5%"},
    "93124": {"note": M + "median 1.10x (22.5 vs 20.4 ms) but mean 6.65x: every epoch's first step takes 449-488 ms "
                          "(the control's 17-34 ms); the profiled step 9 is one of them: DataLoader 147 ms a profiled "
                          "step (78% of it), GPU idle 75.6%"},
    "93126": {"note": M + "1.51x (20.7 vs 13.7 ms) with stalls in the log at steps 5 and 20 (79.8, 68.5 ms); the "
                          "profiled steps 9-11 (32 ms, stretch 1.60) hold only 3.4 ms a step of DataLoader wait (11%): "
                          "the trace alone reads dispatch-bound (idle 71.8%), the class is the construction's, shown "
                          "by the log against the control"},
    "93128": {"note": M + "1.80x (43.9 vs 24.4 ms); DataLoader 19.4 ms a profiled step (44%); host CPU over the "
                          "~1.3 s training window 1.28 busy cores of 16 (93130, the I/O-bound loader: 0.95): the "
                          "difference is one worker's spin, weak at the sampler's 0.25 s on a 0.5 s run"},
    "93130": {"note": M + "1.76x (39.5 vs 22.5 ms); DataLoader 16.5 ms a profiled step (41%); host CPU 0.95 busy "
                          "cores of 16 over the training window (the sleeping worker uses none; 93128: 1.28)"},
    "93132": {"pending": True,
              "note": "NOT made: on 2026-12-01 the run hung until the driver's 180 s timeout (only the start lines "
                      "on stderr): its 8 workers were forked from a parent whose libgomp pool was up and set 16 "
                      "threads each; GNU OpenMP is not fork-safe (GCC bug 60035). Reproduced on CPU (hangs with "
                      "the same arguments), fixed in workloads/train.py (forkserver workers with --worker-threads); "
                      "to be rerun with its control (README)"},
    "93137": {"note": M + "2.06x (6.8 vs 3.3 ms); 6 'Torch-Compiled Region' a step (93138: 1); GPU idle 94.2%"},
    # ---------------------------------------------------------------- issue 34: host-side kinds
    "93201": {"note": M + "5.29x (29.1 vs 5.5 ms); 16 Memcpy DtoH (Device -> Pageable) of 83.9 MB a step = the "
                          "parameters (run_info param_bytes); exposed memcpy 64.6% of the window, computing 13.3%, "
                          "idle 22.1%: no class rule fires (class not scored); largest idle attribution "
                          "cudaMemcpyAsync at faults.py:198 (copy_params_to_host)"},
    "93202": {"note": M + "6.33x (30.4 vs 4.8 ms); the same 16 copies of 83.9 MB a step, exposed memcpy 68.0%; no "
                          "Python stacks in the trace"},
    "93203": {"note": M + "1.71x (8.2 vs 4.8 ms); 14 cudaMalloc + 14 cudaFree a profiled step (93210: 0); largest "
                          "idle attribution the allocator (cudaFree 1.6 ms of 8.7); GPU idle 54.9%"},
    "93204": {"note": M + "18.8x (112.6 vs 6.0 ms); aten::linear 1 036 a step on batch-1 shapes (93205: 16); GPU "
                          "idle 94.5%; critical path by call site models.py:328 (forward) 52%"},
    "93206": {"note": M + "8.64x (47.5 vs 5.5 ms); 41.7 ms a step outside every recorded op at faults.py:82 (spin, "
                          "called by python_metrics, the injected line), GPU idle 92.1%"},
    "93207": {"note": M + "32.5x (178.6 vs 5.5 ms); 178 ms a step outside every op at faults.py:209 (gc_pause), GPU "
                          "idle 97.9%"},
    "93208": {"klass": "dispatch-bound",
              "note": M + "21.7x (119.6 vs 5.5 ms); 106.6 ms a step outside every op at faults.py:204 "
                          "(save_checkpoint), 16 DtoH copies of 83.9 MB; the DtoH memcpy is only 5.1% of the window "
                          "and the GPU idles 91.7%: the construction's reason for leaving the class open (the GPU's "
                          "memcpy) does not hold, the class is dispatch-bound (the host does not issue work)"},
    "93209": {"note": M + "12.3x (61.4 vs 5.0 ms); aten::sort/std/sub/div on the host at faults.py:221 "
                          "(cpu_preprocess), 51.2 ms of a 60.9 ms step with the GPU idle; host CPU 6.25 busy cores "
                          "(93212: 1.03)"},
    # ---------------------------------------------------------------- reruns of the first cases, the profiler pair
    "93101": {"note": M + "rerun beside its control: 4.81x (62.1 vs 12.9 ms); DataLoader 36.5 ms a profiled step "
                          "(58%), GPU idle 83.4%"},
    "93102": {"score_cause": False,
              "note": M + "rerun beside its control: NO measurable effect: 1.05x median (17.6 vs 16.8 ms), 1.03x "
                          "unprofiled, 0.91x mean, though the syncs are there: 92 cudaStreamSynchronize and 14 "
                          "aten::isnan a profiled step (93120: 2 and 0). The control is already host-bound (idle "
                          "48% of its step), so draining the stream costs little. Kept as a run, scored for its class "
                          "(dispatch-bound, idle 57.8%), not for the cause or the lever; host-sync is scored on "
                          "93123 (2.26x)"},
    "93106": {"note": M + "rerun beside its control: 5.22x (93.5 vs 17.9 ms); GPU busy 98.2%, 49% of kernel time fp32 "
                          "GEMMs (sm80_xmma f32f32, the math path upcasts) and 33% elementwise over the score matrix; "
                          "93134 runs cudnn flash kernels"},
    "93107": {"note": M + "rerun beside its control: 368x (2 022 vs 5.5 ms); 2 019 ms a step in Dynamo/Inductor on "
                          "the host (idle attribution 'dynamo'), GPU idle 97.9%"},
    "93108": {"note": M + "rerun beside its control: 1.38x (23.2 vs 16.8 ms); GPU idle 71.6%, the host's idle time "
                          "in the ops' CPU side (10.2 ms) and launches (4.8 ms) that each wait for their kernel"},
    "93135": {"note": M + "profiled step 73.4 ms against 38.2 ms unprofiled (stretch 1.92; 93136 with the default "
                          "profiler: 42.1 against 33.3, 1.26); the same 27.8 ms of GPU computation a step as 93136. "
                          "Class compute-bound (borderline): GPU computing 73% of its own unprofiled step, 83% of "
                          "93136's (the same job); 38.8% of the stretched profiled window"},
    "93136": {"note": M + "GPU computing 83.3% of the unprofiled step (27.7 of 33.3 ms); 64.6% of the profiled "
                          "window (stretch 1.26)"},
    # ---------------------------------------------------------------- controls
    "93112": {"present": ["compute-bound-gemm"],
              "note": M + "GPU computing 93.9%, GEMM 70% of kernel time (sm90 tf32 tensor-core kernels)"},
    "93120": {"note": M + "GPU idle 64.7% of the profiled window, 48% of the unprofiled step (stretch 1.52); mean "
                          "kernel 21.8 us (not under the 20 us launch-overhead rule); 2 syncs a step"},
    "93115": {"note": M + "class borderline compute-bound: GPU computing 78.7% of the unprofiled step, 76.3% of the "
                          "window (idle 22%, 11% of it the main process building the batch: num_workers 0)"},
    "93117": {"note": M + "GPU computing 82.0% (CONV 41.5%, elementwise/reduce 57% of kernel time) plus 12.8% "
                          "exposed pinned HtoD memcpy; idle 5.2%"},
    "93122": {"present": ["kernel-launch-overhead"],
              "note": M + "GPU idle 99.2%: 265 kernels a step, mean 3.4 us (the launch-overhead rule: idle >= 40% "
                          "with mean kernel < 20 us); the host's time in Optimizer.step (54 ms of the 108 ms profiled "
                          "step: foreach AdamW still reads each of the 2 048 tensors' step count with .item(), 4 100 a "
                          "step) and the 512 experts' forward/backward ops (30 ms)"},
    "93125": {"note": M + "GPU idle 72.3% of the window, 57% of the unprofiled step; DataLoader 2.4 ms a step"},
    "93127": {"note": M + "class borderline dispatch-bound: GPU idle 52.1% of the window, 33.5% of the unprofiled "
                          "step (stretch 1.39; computing 66%: between the two rules, nearer this one)"},
    "93129": {"note": M + "GPU idle 73.5% of the window, 62% of the unprofiled step"},
    "93131": {"note": M + "GPU idle 64.1% of the window, 45% of the unprofiled step; DataLoader 0.02 ms a step"},
    "93133": {"note": M + "GPU idle 61.4% of the window, 43% of the unprofiled step (made with fork-started "
                          "workers, before the 93132 fix; one thread each)"},
    "93134": {"klass": "compute-bound",
              "note": M + "GPU computing 93.6%, idle 6.3% (stretch 1.02): compute-bound (the construction left "
                          "it open with its case; a control is scored for its class)"},
    "93138": {"present": ["kernel-launch-overhead"],
              "note": M + "GPU idle 89.2%: 54 kernels a step, mean 6.2 us (the launch-overhead rule)"},
    "93139": {"present": ["kernel-launch-overhead"],
              "note": M + "GPU idle 92.9%: 54 kernels a step, mean 6.5 us; one graph after the first steps"},
    "93141": {"note": M + "class borderline dispatch-bound: GPU idle 57.5% of the window, 31.6% of the unprofiled "
                          "step (stretch 1.49; computing 68%: between the two rules)"},
    "93210": {"present": ["compute-bound-gemm"],
              "note": M + "GPU computing 89.0% of the unprofiled step (3.83 of 4.3 ms), 79.0% of the window "
                          "(stretch 1.13); GEMM 62% of kernel time"},
    "93211": {"present": ["compute-bound-gemm"],
              "note": M + "class borderline compute-bound: GPU computing 77.3% of the unprofiled step (3.83 of "
                          "4.95 ms), 50.9% of the window: with stacks the profiled step is 6.9 ms (stretch 1.39; "
                          "93210 without: 4.9 ms) -- what with_stack costs on this step; GEMM 62% of kernel time"},
    "93205": {"present": ["compute-bound-gemm"],
              "note": M + "class borderline compute-bound: GPU computing 73.9% of the unprofiled step (3.88 of "
                          "5.25 ms), 47.0% of the window (stacks and shapes: stretch 1.58); GEMM 62% of kernel time"},
    "93212": {"present": ["compute-bound-gemm"],
              "note": M + "GPU computing 87.8% of the unprofiled step, 73.6% of the window (stacks: stretch 1.15); "
                          "GEMM 58% of kernel time"},
    # ---------------------------------------------------------------- the first cases' control (2026-11-30)
    "93110": {"klass": "dispatch-bound",
              "note": "measured 2026-11-30 (H200): class borderline dispatch-bound: GPU idle 60.0% of the window, "
                      "38.7% of the unprofiled step (stretch 1.59; computing 60%); bundled among the cases now "
                      "(a control is scored for its class)"},
}
"""Jobid -> what its run showed (see the module docstring)."""
