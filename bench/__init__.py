"""paddleray benchmarks: `python -m bench <name> [--quick]` (see ../shared/BENCHMARKS.md)."""
