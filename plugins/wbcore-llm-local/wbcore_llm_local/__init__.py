"""wbcore-llm-local: a local OpenAI-compatible model server (llama.cpp) on loopback."""
