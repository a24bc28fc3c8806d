"""A built-in OpenAI-compatible LLM server simulator (`llmwatch simulate`)."""
