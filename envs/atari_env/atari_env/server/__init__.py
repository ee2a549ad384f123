"""Server side of the Atari environment."""
