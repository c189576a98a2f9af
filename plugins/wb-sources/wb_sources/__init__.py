"""wb-sources: the BUILD_SRC prefixes."""
