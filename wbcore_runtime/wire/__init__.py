"""The wire: the host<->guest frame format and the caps bridge that carries cap calls over it."""
