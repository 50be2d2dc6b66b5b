"""The perf-optimizer loop of ``ai4s-graph optimize``: baseline, pick a lever, run, guard, accept
or revert, journal. ``graph.py`` is the loop; ``nodes.py`` its steps."""
