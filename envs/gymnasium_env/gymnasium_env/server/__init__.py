"""Server side of the Gymnasium environment."""
