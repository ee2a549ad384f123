"""Server side of the OpenSpiel environment."""
