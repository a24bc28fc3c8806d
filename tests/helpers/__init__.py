"""Test helpers, one place for every lane: agents on loopback, processes, services, traffic."""
