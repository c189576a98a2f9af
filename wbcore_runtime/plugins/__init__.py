"""The plugin manager: entry points scanned once per set of installed distributions, the
plugin index ``wbx run`` checks without loading a plugin, and ``#+BUILD_SRC`` prefix selection."""
