"""Trust: identities and did:key/did:web, signing, consent, capability policy (effective caps),
THE trust verdict (``verdict``) and the audit of a toolkit's provenance."""
