"""Trust: identities and did:key/did:web, signing, consent, capability policy (effective caps)
and THE trust verdict (``verdict``): whether a toolkit may run, and with what."""
