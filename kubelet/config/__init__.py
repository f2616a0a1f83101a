"""Pod sources (static files, a manifest URL, the API server) merged into one update stream."""
