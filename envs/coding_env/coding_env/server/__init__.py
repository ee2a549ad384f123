"""Server side of the coding environment."""
