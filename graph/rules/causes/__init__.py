"""One cause a module (the protocol: :mod:`.base`); every module is listed once in
:data:`ai4s_graph.graph.rules.registry.CAUSES`."""
