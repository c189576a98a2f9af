"""wbcore-install: the toolkit installer (``wbx toolkit install``, ``--locked``, uninstall, the
landing journal and ``wbx.lock``), served through ``wbcore_installers``."""
