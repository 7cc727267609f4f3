"""Trainer loop, update, checkpoints, metrics and the per-step display."""
