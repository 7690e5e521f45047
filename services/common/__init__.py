"""Scaffolding every paddleray service shares: server, errors, auth, settings, metrics, logs."""
