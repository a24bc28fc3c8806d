"""Checks: verdicts on one sample (rules, embeddings, a judge model), the registry of kinds, and scoring a batch."""
