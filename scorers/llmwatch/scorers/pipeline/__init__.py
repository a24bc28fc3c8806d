"""Pipeline stages every sample passes before it is stored or shipped: sampling, PII detection, redaction."""
