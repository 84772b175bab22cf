"""agentlab: a lab for agent context governance."""
