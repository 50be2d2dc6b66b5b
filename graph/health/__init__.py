"""Node health and cluster evaluation: ``probe_graph.py`` (``ai4s-graph probe``) and
``eval_graph.py`` (``ai4s-graph eval-cluster``). The measurements are in ``tools/cluster/``."""
