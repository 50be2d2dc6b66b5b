"""Lever catalogs shipped with ai4s-graph (``levers/<model>.yaml``), validated by
:mod:`ai4s_graph.state.loop`; see :func:`ai4s_graph.tools.levers.bundled_catalog`."""
