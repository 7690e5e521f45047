"""Runs in: wherever its modules run (this file holds nothing).

Deployments: their rules, the manager, placement checks, the reconciler.
"""
