"""wbcore-process: the build sandbox, the os_process tier, and the task shape."""
