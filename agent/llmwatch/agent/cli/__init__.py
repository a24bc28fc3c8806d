"""The `llmwatch` command line: one module per group of subcommands."""
