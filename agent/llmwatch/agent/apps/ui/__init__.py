"""`llmwatch ui`: a local web app from a metric or an alert to the samples behind it (app.py, index.py)."""
