"""wbcore-lane-python: the python build lane (componentize-py → a WIT-typed component)."""
