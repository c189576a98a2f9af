"""wbcore-container: the container isolation tier on bubblewrap."""
