"""paddleray benchmarks: `python -m bench <name> [--quick]` (what each measures and its target: bench/README.md)."""
