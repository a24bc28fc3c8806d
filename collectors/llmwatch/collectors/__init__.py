"""Ways in and out: the proxy, OTLP ingest and export, files, Kafka, metrics and webhooks."""
