"""``python -m ai4s_graph.cli``: the ``ai4s-graph`` command line."""

from . import entry

entry()
