"""Server side of the Jupyter environment."""
