"""Server side of the chess environment."""
