"""wbcore-oci: the OCI distribution client (``oci://`` installs, skill images, ``wbx publish oci``)."""
