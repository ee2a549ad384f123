"""Server side of the terminal environment."""
