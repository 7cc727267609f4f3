"""Datasets and prompt sources."""
