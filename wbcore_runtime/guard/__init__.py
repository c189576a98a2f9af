"""Guards: every way out of the host goes through one function here — path containment, the SSRF
guard, HTTP bounds, the one fetcher (HTTP and git), unpacking, registry hosts, seccomp and preopens."""
