"""wbcore-llm-openai: the ``openai`` LLM provider (chat completions) on the official openai SDK."""
