"""wbcore-demo: ``wbx demo``, a walk through the shipped toolkits (discover, build, run, verify),
offline, against a local web site it serves on 127.0.0.1 (:mod:`wbcore_demo.demosite`)."""
