"""The embedded default: demo task policy warm-start and `tailrl demo`."""
