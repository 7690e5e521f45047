"""Runs in: wherever its modules run (this file holds nothing).

The exporter's Redis state: keys, Lua scripts, the registry and deployment stores, the lost-store guard.
"""
