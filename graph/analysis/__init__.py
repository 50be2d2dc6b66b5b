"""The analysis state machine of ``ai4s-graph run``: one job in, one verdict out.

- ``graph.py``: the graph (launcher -> trace analyst || telemetry analyst -> their verifiers -> synthesizer);
- ``schema.py``: its typed state; ``configuration.py``: the read-only request; ``inputs.py``: the
  run's log and job script as the nodes read them (once, through the tools);
- ``nodes/``: one module per node. Claims are MADE in ``nodes/trace_analyst.py`` and
  ``nodes/telemetry_analyst.py``, CHECKED in ``nodes/trace_verifier.py`` and
  ``nodes/telemetry_verifier.py``, REPORTED in ``nodes/synthesizer.py``.

The rules the nodes apply (classes, verdict, causes, figures, levers) are the rules room,
``graph/rules/``; claim construction and verdict arithmetic are ``state/claimkit.py``.
"""
