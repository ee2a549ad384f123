"""Server side of the trading environment."""
