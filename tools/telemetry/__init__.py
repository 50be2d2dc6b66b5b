"""GPU and node telemetry, one module per concern: ``metrics.py`` (the logical metric name map over
Omnistat ``rocm_*``, dcgm-exporter ``DCGM_FI_*`` and node_exporter names; a new metric goes here),
``promql.py`` (the analysts' PromQL: statistics over the raw samples of the job's SLURM window,
joined by host, and card where ``rmsjob_info`` names cards, through ``rmsjob_info``), ``gpujoin.py``
(the job's GPUs per host from ``rmsjob_info``'s ``card`` label), ``rawstats.py`` (the verifiers' plain-Python statistics
over raw samples), ``export.py`` (the JSON-lines export format, from a file or ``/api/v1/export``, with what it left
out counted), ``bounds.py`` (plausibility bounds per metric)
and ``victoria.py`` (a VictoriaMetrics on loopback loaded from a run's export)."""
