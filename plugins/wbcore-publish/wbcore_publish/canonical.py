"""Canonical JSON and the one signature check every wbcore-publish surface calls.

The signed bytes of a bundle manifest and of a page manifest are the *canonical JSON* of
the manifest object without its ``signature`` member (``docs/bundles.md`` gives it byte
for byte): UTF-8 of ``json.dumps(obj, sort_keys=True, separators=(",", ":"),
ensure_ascii=True)`` — object keys sorted by code point, no whitespace, every non-ASCII
character as a ``\\uXXXX`` escape (lower-case hex, surrogate pairs above U+FFFF), values
limited to objects, arrays, strings, integers, ``true``, ``false`` and ``null``. Floats
are refused (their text form is not stable across writers). Duplicate keys are refused
when parsing, so a manifest means one thing to every reader.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from wbcore_runtime.trust import did as _did
from wbcore_runtime.trust import identity as _identity
from wbcore_runtime.contract.canonical import canonical_json
from wbcore_runtime.contract.errors import InvalidArgs, WbError

MAX_DEPTH = 16


class ManifestFormatError(InvalidArgs):
    """A manifest that is not well-formed canonical-able JSON."""


def _check(value: Any, where: str, depth: int = 0) -> None:
    if depth > MAX_DEPTH:
        raise ManifestFormatError(f"{where}: nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return
    if isinstance(value, int):
        return
    if isinstance(value, float):
        raise ManifestFormatError(f"{where}: floats are not allowed in a signed manifest (use an integer or "
                                  "a string)")
    if isinstance(value, list):
        for i, v in enumerate(value):
            _check(v, f"{where}[{i}]", depth + 1)
        return
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise ManifestFormatError(f"{where}: object keys must be strings")
            _check(v, f"{where}.{k}", depth + 1)
        return
    raise ManifestFormatError(f"{where}: {type(value).__name__} is not a JSON value")


def canonical(obj: Mapping[str, Any]) -> bytes:
    """The signed bytes: canonical JSON of ``obj`` without its ``signature`` member."""
    body = {k: v for k, v in obj.items() if k != "signature"}
    _check(body, "manifest")
    return canonical_json(body)


def serialize(obj: Mapping[str, Any]) -> bytes:
    """A whole manifest (its signature included) in the same canonical JSON, as stored."""
    _check(dict(obj), "manifest")
    return canonical_json(dict(obj))


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise ManifestFormatError(f"manifest: key {k!r} appears twice")
        out[k] = v
    return out


def parse(data: bytes, where: str) -> dict[str, Any]:
    """A manifest object from JSON bytes: UTF-8, no duplicate keys, no floats, an object."""
    try:
        obj = json.loads(data.decode("utf-8"), object_pairs_hook=_no_duplicates,
                         parse_float=lambda s: float(s), parse_constant=lambda s: float("nan"))
    except ManifestFormatError as exc:
        raise ManifestFormatError(f"{where}: {exc.message}") from None
    except (ValueError, RecursionError) as exc:  # also an integer past Python's digit limit
        raise ManifestFormatError(f"{where}: not valid JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise ManifestFormatError(f"{where}: the manifest must be a JSON object")
    _check(obj, where)
    return obj


def encode_signature(sig: bytes) -> str:
    return base64.urlsafe_b64encode(sig).rstrip(b"=").decode("ascii")


def decode_signature(text: Any) -> bytes | None:
    if not isinstance(text, str) or len(text) != 86:
        return None
    try:
        raw = base64.urlsafe_b64decode(text + "==")
    except (binascii.Error, ValueError):
        return None
    return raw if len(raw) == 64 and encode_signature(raw) == text else None


def signer_did(ident: _identity.Identity, did_web_host: str | None) -> str:
    """The DID a manifest names: the identity's did:key, or a did:web publishing the same key."""
    return _did.did_for_host(did_web_host) if did_web_host else ident.did


def sign(obj: dict[str, Any], ident: _identity.Identity) -> dict[str, Any]:
    """``obj`` with its ``signature``: Ed25519 over :func:`canonical`, base64url unpadded."""
    signer = obj.get("signer")
    if not isinstance(signer, str):
        raise InvalidArgs("a manifest names its signer before it is signed")
    if (signer.startswith(_identity.DID_KEY_PREFIX)
            and _identity.public_key_from_did(signer) != ident.public_key):
        raise InvalidArgs(f"{signer} is not the did:key of the signing key ({ident.did})")
    return {**obj, "signature": encode_signature(ident.sign(canonical(obj)))}


@dataclass(frozen=True, slots=True)
class SignatureCheck:
    ok: bool
    reason: str
    signer: str | None


def check_signature(obj: Mapping[str, Any], *, env: Mapping[str, str] | None = None,
                    allow_http_loopback: bool = False, resolve_web: bool = True) -> SignatureCheck:
    """Does ``signature`` verify over the canonical form under a key of ``signer``?

    The one signature decision of wbcore-publish: bundles, pages and the library all call it.
    A did:web signer is resolved through the core (``wbcore_runtime.trust.did``: one fetcher, SSRF guard).
    """
    signer = obj.get("signer")
    if not isinstance(signer, str) or not signer.startswith(("did:key:", "did:web:")):
        return SignatureCheck(False, "the manifest names no did:key or did:web signer", None)
    sig = decode_signature(obj.get("signature"))
    if sig is None:
        return SignatureCheck(False,
                              "the manifest carries no well-formed signature (86 base64url characters)",
                              signer)
    try:
        form = canonical(obj)
    except ManifestFormatError as exc:
        return SignatureCheck(False, exc.message, signer)
    if signer.startswith("did:web:") and not resolve_web:
        return SignatureCheck(False, f"{signer} was not resolved (offline)", signer)
    try:
        keys = _did.public_keys(signer, env=env, allow_http_loopback=allow_http_loopback)
    except WbError as exc:
        return SignatureCheck(False, f"cannot get the key of {signer}: {exc.message}", signer)
    if any(_identity.verify(k, form, sig) for k in keys):
        return SignatureCheck(True, f"signature valid, signed by {signer}", signer)
    return SignatureCheck(False, f"the signature does not verify under the key of {signer} "
                                 "(the manifest was changed after signing, or signed by another key)", signer)
