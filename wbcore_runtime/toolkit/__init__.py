"""Toolkits: the Org manifest and its markup, discovery over the roots, skills, agents,
search, task blocks and verification (``wbx toolkit verify``)."""
