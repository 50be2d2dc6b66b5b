"""Cluster evaluation and node probes: ``gpu_bench.py`` (self-contained torch measurements run on
the GPU nodes), ``node_probe.py`` (``ai4s-graph probe``), ``evalcluster.py`` (``ai4s-graph
eval-cluster``: orchestration and writing), ``report_build.py`` + ``templates/eval_report.md.j2``
(the dated report), ``report_check.py`` + ``rules/`` (the report rules, one module per group, on ``mdparse.py``)."""
