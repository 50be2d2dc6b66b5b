"""Levers, in one place: ``catalog.py`` (the catalog model, YAML loading and the loop's
bookkeeping), ``catalogs/*.yaml`` (the bundled catalogs: HydraGNN, ORBIT-2, cpu-toy), ``rules.py``
(the generic levers of each bottleneck class) and ``recommend.py`` (catalog first, then the rules:
what the report recommends and the optimizer tries)."""
