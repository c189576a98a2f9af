"""wb-act: the ACT tool-provider model (seed 002) and every toolkit as an ACT provider."""
