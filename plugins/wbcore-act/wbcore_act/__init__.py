"""wbcore-act: the ACT revision adapters (0.1, seed, 0.2, 0.4 wire forms) and the ``wbx call`` /
``wbx act`` commands; the ACT model and the toolkit provider are the core's (``wbcore_runtime.act``)."""
