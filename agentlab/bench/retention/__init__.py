"""LLM-free retention: what a context policy keeps of a question's evidence or a trajectory's supports.

Also how a history is delivered (turns or tool results), the cache of measured rows, and the
prompt-cache check against recorded sessions.
"""
