"""GPU and node telemetry: ``promql.py`` (one logical metric set over Omnistat ``rocm_*``,
dcgm-exporter ``DCGM_FI_*`` and node_exporter names, joined to the job through ``rmsjob_info``) and
``victoria.py`` (a VictoriaMetrics on loopback loaded from a run's JSON-lines export).
A new telemetry metric goes in ``promql.py``'s name map."""
