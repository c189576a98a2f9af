"""The container tier's guest agent for terminal sessions: ``python3 -I -S /wb/agent.py <secret-fd>``.

The container's own Debian ``python3`` runs it as the container's entry (uid 1000, no
capabilities, no network, read-only root). It speaks the framed protocol on fds 0 and 1
(the host's pipes) and serves PTY sessions with :class:`pty_agent.Agent` (wbcore-terminal's
``wbcore_terminal/agent.py``, ``Terminal.agent_file``, bound in next to ``frames.py``): the same
frames the microvm guest agent reads. The
session secret arrives on a pipe (never in the environment or a file another process of
the container could read); the allowlist and rlimits in ``/wb/agent.json``.
"""

import json
import sys


def main():
    sys.path[:0] = ["/wb/lib"]
    import frames
    import pty_agent

    secret = frames.read_secret(int(sys.argv[1]))
    with open("/wb/agent.json", "rb") as fh:
        config = json.load(fh)
    chan = frames.stdio_channel()  # a stray print cannot corrupt the protocol
    agent = pty_agent.Agent(chan, secret, config["allow"], nofile=int(config["nofile"]),
                            nproc=int(config["nproc"]))

    def serve():
        agent.handshake()
        agent.serve()

    frames.serve_host(chan, serve, "wbcore-agent")


if __name__ == "__main__":
    main()
