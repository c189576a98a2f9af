"""wbcore-sources: the BUILD_SRC prefixes."""
