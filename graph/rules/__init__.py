"""The rules room: pure functions of typed findings, no file reading, no environment lookups
(``tests/test_layers.py`` checks both). The nodes read the inputs through ``tools/`` and hand the
tables here; what the numbers mean is decided here.

- ``diagnosis.py``: the class rules (compute-, dispatch-, memory-, data-loader-, communication-bound)
  and their cited thresholds;
- ``verdict.py``: one verdict across ranks and sources (the straggler, contradictions, confidence);
- ``context.py``: representativeness of the profile, progress of a failed job (hang or slow),
  busbw against the cluster's measurement or the datasheet;
- ``figures.py``: the figures the analysts claim and the causes read (:class:`~.figures.Figure`:
  unit, how the analyst makes it, how the verifier re-derives it, tolerance, supported classes);
- ``causes/``: one cause a module (:mod:`.causes.base` is the protocol);
- ``registry.py``: the two registries (every cause, every claimable figure) the nodes loop over;
- ``levers.py``: the lever choice and order.
"""
