"""wbcore-brokers-build: the BuildBroker (cap ``build``, seed 004)."""
