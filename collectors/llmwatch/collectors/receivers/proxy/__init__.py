"""The transparent reverse proxy: the relay core, what it captures of a call, the upstream probe."""
