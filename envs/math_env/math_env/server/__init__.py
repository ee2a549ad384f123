"""Server side of the math environment."""
