"""piestream.meta."""
