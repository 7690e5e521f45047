"""Runs in: wherever its modules run (this file holds nothing).

ExportModel on the exporter's side: the request's rules, its source, the long-running operation.
"""
