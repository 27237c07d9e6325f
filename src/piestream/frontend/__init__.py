"""piestream.frontend."""
