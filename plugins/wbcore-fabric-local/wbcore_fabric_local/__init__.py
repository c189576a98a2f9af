"""wbcore-fabric-local: the fabric's engines on one machine (``local`` processes, ``threads``)."""
