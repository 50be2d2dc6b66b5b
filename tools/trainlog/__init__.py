"""Training logs: ``formats.py`` reads a run's log into steps and epochs (three formats),
``fom.py`` computes its figures of merit (epoch time, throughput) with the integrity fields the
optimizer's guards compare and writes ``foms.json``, ``precision.py`` is the precision
discriminator, ``models.py`` the result models."""
