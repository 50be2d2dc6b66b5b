"""The nodes of the analysis graph, one module per node (see ``graph/analysis/graph.py``)."""
