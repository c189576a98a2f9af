"""The container tier's guest agent for terminal sessions: ``python3 -I -S /wb/agent.py <secret-fd>``.

The container's own Debian ``python3`` runs it as the container's entry (uid 1000, no
capabilities, no network, read-only root). It speaks the framed protocol on fds 0 and 1
(the host's pipes) and serves PTY sessions with :class:`terminal.Agent` (``wbcore/terminal.py``,
copied in next to ``frames.py``): the same frames the microvm guest agent reads. The
session secret arrives on a pipe (never in the environment or a file another process of
the container could read); the allowlist and rlimits in ``/wb/agent.json``.
"""

import json
import os
import sys


def main():
    sys.path[:0] = ["/wb/lib"]
    import frames
    import terminal

    fd = int(sys.argv[1])
    secret = b""
    while len(secret) < frames.SECRET_BYTES:
        chunk = os.read(fd, frames.SECRET_BYTES - len(secret))
        if not chunk:
            break
        secret += chunk
    os.close(fd)
    with open("/wb/agent.json", "rb") as fh:
        config = json.load(fh)
    # fds 0 and 1 are the protocol; a stray print must not corrupt it, and no session child
    # inherits them (they are close-on-exec).
    chan = terminal.Channel(os.dup(0), os.dup(1))
    for end in (chan.read_fd, chan.write_fd):
        os.set_inheritable(end, False)
    null = os.open("/dev/null", os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(2, 1)
    os.close(null)
    agent = terminal.Agent(chan, secret, config["allow"], nofile=int(config["nofile"]), nproc=int(config["nproc"]))
    try:
        agent.handshake()
        agent.serve()
    except frames.FrameError as exc:
        if exc.reason != "eof":
            try:
                chan.send_frame(frames.refused(exc.reason, exc.message))
            except OSError:
                pass
            sys.stderr.write(f"wb-agent: {exc.message}\n")
            sys.exit(3)
    except BrokenPipeError:
        pass


if __name__ == "__main__":
    main()
