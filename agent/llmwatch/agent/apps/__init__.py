"""Applications a person runs: the demo, the review app, the simulator."""
