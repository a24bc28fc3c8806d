"""The runtime that wires receivers, processors and exporters, and the command line."""
