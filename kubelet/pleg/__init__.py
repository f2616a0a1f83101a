"""Pod lifecycle event generator: relists the runtime and reports container changes."""
