"""Runs in: wherever its modules run (this file holds nothing).

The exporter's side of Ray Serve: the declarative config, status, ownership, ports.
"""
