"""wbcore-brokers-net: host-mediated egress for the Dock (net, browse, tcp, udp, tls)."""
