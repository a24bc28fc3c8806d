"""The processes llmwatch runs beside the proxy: the scorer child, the mirror child, the Kafka workers."""
