"""The analysis state machine of ``ai4s-graph run``: one job in, one verdict out.

- ``graph.py``: the graph (launcher -> trace analyst || telemetry analyst -> their verifiers -> synthesizer);
- ``schema.py``: its typed state; ``configuration.py``: the read-only request;
- ``nodes/``: one module per node. Claims are MADE in ``nodes/trace_analyst.py`` and
  ``nodes/telemetry_analyst.py``, CHECKED in ``nodes/trace_verifier.py`` and
  ``nodes/telemetry_verifier.py``, REPORTED in ``nodes/synthesizer.py``;
- ``diagnosis.py``: the bottleneck rules and their cited thresholds; ``claimkit.py``: building claims
  and judging a re-derived value against them.
"""
