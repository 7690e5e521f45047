"""Runs in: wherever its modules run (this file holds nothing).

The exporter service: its subpackages, grouped by concern and by where they run (README.md).
"""
