"""Traces: PyTorch profiler (kineto) JSON in, GPU timeline / kernels / collectives out.

One engine computes every per-rank figure at every size: ``stream.py`` (the bounded-memory streaming
scan; its per-event loop ``scan_loop.py``, read in worker processes by ``scan_parallel.py`` for large
traces; ``lanes.py`` runs a long trace's other readers beside it, in processes of their own) and
``engine.py`` (timeline, ops and kernels by category, kernel statistics, launch overhead, steps,
hygiene findings), ``tables.py`` (TraceLens-shaped CSVs), ``rank_analysis.py`` (one rank, the
unit of the fan-out and of the SLURM array), ``cache.py`` (content-hash cache). Input hygiene:
``ranks.py`` (rank identity), ``hygiene.py`` (graph launches, steady-state window). Across ranks:
``collectives.py`` (matching, busbw), ``stragglers.py``, ``slurm_array.py``. Optional cross-checks:
``backends.py`` (TraceLens, its CSVs, HTA). The verifier's independent path: ``kineto.py`` (the
full-load reader) and ``crossrank_check.py`` (straggler and busbw re-derived from raw kernels)."""
