"""Runs in: wherever its modules run (this file holds nothing).

The model registry: models and versions as resources.
"""
