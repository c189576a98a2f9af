"""wbcore-agent: the agent loop (LLM ↔ tools ↔ VFS), sessions, and toolkits agents make."""
