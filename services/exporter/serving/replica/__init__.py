"""Runs in: wherever its modules run (this file holds nothing).

What runs in a Serve replica: the v2 data plane, its gRPC and REST shells, predictors.
"""
