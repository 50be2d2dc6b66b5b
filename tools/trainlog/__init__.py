"""Training logs: ``fom.py`` parses a run's log into steps and epochs and computes its figures of
merit (epoch time, throughput) with the integrity fields the optimizer's guards compare."""
