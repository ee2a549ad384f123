"""Server side of the reasoning gym environment (it needs the `reasoning-gym` package)."""
