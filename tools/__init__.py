"""See the package docstring of ai4s_graph."""
