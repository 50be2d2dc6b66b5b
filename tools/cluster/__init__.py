"""Cluster evaluation and node probes: ``gpu_bench.py`` (self-contained torch measurements run on
the GPU nodes), ``node_probe.py`` (``ai4s-graph probe``), ``evalcluster.py`` (``ai4s-graph
eval-cluster`` and its dated report), ``report_check.py`` (the report rules)."""
