"""Exporters: ways results go out (files, Kafka, OTLP, Prometheus, webhooks, score records)."""
