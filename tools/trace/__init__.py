"""Traces: PyTorch profiler (kineto) JSON in, GPU timeline / kernels / collectives out.

Per rank: ``stream.py`` (the bounded-memory streaming reader), ``kineto.py`` (the full-load reader
the verifier re-derives with), ``backends.py`` (TraceLens / TraceLens CSVs / HTA as cross-checks),
``cache.py`` (content-hash cache). Across ranks: ``collectives.py`` (busbw, stragglers)."""
