"""OpenTelemetry: the `otel` section and its components, the OTLP span exporter and the OTLP/HTTP trace receiver."""
