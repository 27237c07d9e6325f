"""piestream.server."""
