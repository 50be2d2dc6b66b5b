"""Accuracy benchmark by fault injection (issue 19): cases.py (what runs and the truth), generate.py
(the one device run that makes them), score.py (the scorer)."""
