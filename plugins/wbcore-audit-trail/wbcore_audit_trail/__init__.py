"""wbcore-audit-trail: the audit trail's reader (entries, tail, pages, a cursor, verify)."""
