"""wbcore-publish: portable signed workspaces (``.wbundle``), signed published pages
(``workbooks-c2pa``) and the Library index. Imports only the core."""
