"""wbcore-ray: the ray fabric engine and the node tier."""
