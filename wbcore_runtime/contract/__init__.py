"""The contract: what the core and every plugin agree on — typed records, the hook specs,
errors and exit codes, call records, capability-free driver contracts (LLM, build sandbox,
telemetry) and bounded JSON. It imports nothing of the rest of the core."""
