"""piestream.connectors."""
