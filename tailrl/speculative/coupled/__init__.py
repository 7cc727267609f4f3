"""Coupled speculation: drafting and the exact verify forward in the engine's own process."""
