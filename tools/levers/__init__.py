"""Levers, in one place: ``catalog.py`` (the catalog model, YAML loading and the loop's
bookkeeping) and ``catalogs/*.yaml`` (the bundled catalogs: HydraGNN, ORBIT-2, cpu-toy)."""
