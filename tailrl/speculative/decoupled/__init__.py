"""Decoupled speculation (SpecActor §4.1): a drafter process drafting ahead of the verifier, in lockstep rounds."""
