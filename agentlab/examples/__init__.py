"""Runnable examples of the library (``python -m agentlab.examples.<name>``)."""
