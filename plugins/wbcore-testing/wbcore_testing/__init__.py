"""Test support for wbcore and its plugin authors: the pytest plugin, the conformance suites, the
scripted model server, shared loopback servers and test toolkits.

``wbcore_testing.fixtures`` is the ``wbcore`` pytest11 plugin (``wb_home``, ``make_runtime``,
``wbx``, ...); ``wbcore_testing.conformance`` holds the suites a tier or shape runner inherits;
``wbcore_testing.scripted_llm`` serves scripted chat answers on loopback; ``loopback``,
``toolkit_sources`` and ``samples`` hold the servers, toolkits and sample content the core's tests
and the CLI's share; ``oci_images`` pushes OCI images to the ``oci_registry`` fixture without
wbcore-oci. The runtime never imports this package: install it with a plugin's ``test``
extra.
"""
