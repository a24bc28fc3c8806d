"""llmwatch agent: the sidecar proxy, its sampler, queue and command line."""

__version__ = "0.1.0"
