"""The `paddleray` command line."""
