"""The `openenv` command line."""
