"""Evaluation: the matrix of task types, stability, decisions, regression suites, shadow pairs and blind review."""
