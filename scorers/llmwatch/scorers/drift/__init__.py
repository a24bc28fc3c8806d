"""Drift: a model version's current behaviour against its frozen baseline, in three families, offline and online."""
