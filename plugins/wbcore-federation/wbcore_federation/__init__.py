"""wbcore-federation: the federation shape (REST/JSON sources queried as tables)."""
