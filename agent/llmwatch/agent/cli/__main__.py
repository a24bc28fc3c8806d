"""`python -m llmwatch.agent.cli`: the same as the `llmwatch` command."""

from llmwatch.agent.cli.main import main

raise SystemExit(main())
