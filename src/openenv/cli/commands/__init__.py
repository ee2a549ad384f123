"""One module per `openenv` command; each exposes `register(app)`."""
