"""Receivers: ways calls come in (the proxy, OTLP ingest)."""
