"""Server side of the maze environment."""
