"""wbcore-brokers-secrets: the ``secrets`` cap — a guest may have data signed, never read a key."""
