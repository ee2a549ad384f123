"""Server side of the grid world environment."""
