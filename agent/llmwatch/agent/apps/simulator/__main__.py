"""`python -m llmwatch.agent.apps.simulator --port 0`: the simulator on its own (prints the address it bound)."""

from llmwatch.agent.apps.simulator.server import main

main()
