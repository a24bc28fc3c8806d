"""`python -m llmwatch.agent.cli`: the same as the `llmwatch` command."""

from llmwatch.agent.cli import run

run()
