"""wbcore-brokers-state: the vfs, kv and queue caps of the Dock, on SQLite under $WB_HOME."""
