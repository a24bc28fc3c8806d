"""Processing: sampling, redaction, checks, aggregation, drift and evaluation."""
