"""Server side of the TextArena environment."""
