"""wbcore-llm: the ``llm`` cap (llm-complete) on an OpenAI-compatible chat completions endpoint."""
