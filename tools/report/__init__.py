"""Report rendering shared by the graphs: ``plots.py`` (GPU time breakdown, telemetry, FOM per
iteration)."""
