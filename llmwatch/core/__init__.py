"""The core layer: what every other part of llmwatch builds on. It imports nothing above it."""
