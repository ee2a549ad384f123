"""Server side of the snake environment."""
