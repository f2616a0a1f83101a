"""Pod status: generated from the runtime state, kept versioned by the status manager."""
