"""Runs in: wherever its modules run (this file holds nothing).

Serving on Ray Serve: control/ (the exporter's side), replica/ (a Serve replica), shared specs at the top.
"""
