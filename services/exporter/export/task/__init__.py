"""Runs in: wherever its modules run (this file holds nothing).

The export itself, on the cluster, and what crosses the task boundary.
"""
