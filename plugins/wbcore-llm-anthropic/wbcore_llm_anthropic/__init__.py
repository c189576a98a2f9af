"""wbcore-llm-anthropic: the ``anthropic`` LLM provider (Messages API) on the official anthropic SDK."""
