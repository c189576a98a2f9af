"""Tenant identity: one Ed25519 keypair per tenant, published as ``did:key`` (seed 004).

The keypair lives under ``$WB_HOME/identity/<tenant>.ed25519`` (the 32-byte seed,
base64, file mode 0600), created once and atomically: two processes racing to create
it end with one key. ``WB_SIGNING_KEY`` (base64 of a 32-byte seed) overrides the
stored key and is never written anywhere.

``did:key`` encoding (W3C did:key, seed 004): ``did:key:z`` + base58btc(0xED 0x01 ‖
32-byte public key). Verification decodes the key straight from the DID, no registry.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from wbcore_runtime.contract.errors import InvalidArgs

#: multicodec ``ed25519-pub`` as an unsigned varint: 0xED 0x01.
ED25519_PUB = b"\xed\x01"
#: A few other key types a did:key may carry, named in refusals (multicodec varints).
OTHER_KEY_TYPES = {
    b"\xec\x01": "X25519 (0xec)",
    b"\xe7\x01": "secp256k1 (0xe7)",
    b"\x80\x24": "P-256 (0x1200)",
    b"\x81\x24": "P-384 (0x1201)",
    b"\x85\x24": "RSA (0x1205)",
    b"\xeb\x01": "BLS12-381 G2 (0xeb)",
}
DID_KEY_PREFIX = "did:key:"
TENANT_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
ENV_SIGNING_KEY = "WB_SIGNING_KEY"
#: A stored key is one line of base64 (45 bytes); a longer file is not a key.
MAX_KEY_FILE_BYTES = 4096

_B58 = "123456789ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz"
_B58_INDEX = {c: i for i, c in enumerate(_B58)}
MAX_B58_CHARS = 256


class KeyTypeError(InvalidArgs):
    """A well-formed DID or multikey of a key type other than Ed25519."""


def b58encode(data: bytes) -> str:
    """base58btc (the Bitcoin alphabet); leading zero bytes become leading ``1``s."""
    n = int.from_bytes(data, "big")
    out = []
    while n:
        n, r = divmod(n, 58)
        out.append(_B58[r])
    pad = len(data) - len(data.lstrip(b"\0"))
    return "1" * pad + "".join(reversed(out))


def b58decode(text: str) -> bytes:
    if len(text) > MAX_B58_CHARS:
        raise ValueError(f"base58 text longer than {MAX_B58_CHARS} characters")
    n = 0
    for ch in text:
        if ch not in _B58_INDEX:
            raise ValueError(f"{ch!r} is not a base58btc character")
        n = n * 58 + _B58_INDEX[ch]
    pad = len(text) - len(text.lstrip("1"))
    body = n.to_bytes((n.bit_length() + 7) // 8, "big") if n else b""
    return b"\0" * pad + body


def did_key(public_key: bytes) -> str:
    """The ``did:key`` of a 32-byte Ed25519 public key."""
    if len(public_key) != 32:
        raise InvalidArgs(f"an Ed25519 public key is 32 bytes, not {len(public_key)}")
    return DID_KEY_PREFIX + "z" + b58encode(ED25519_PUB + public_key)


def multibase_key(public_key: bytes) -> str:
    """``z6Mk…``: the multibase/multicodec form used in did documents (publicKeyMultibase)."""
    return did_key(public_key)[len(DID_KEY_PREFIX):]


def decode_multikey(value: str, *, where: str = "key") -> bytes:
    """The Ed25519 public key inside a ``z``-multibase multicodec key; other types refused."""
    if not value.startswith("z"):
        raise InvalidArgs(f"{where} {value[:60]!r} is not base58btc multibase (it must start with 'z')")
    try:
        raw = b58decode(value[1:])
    except ValueError as exc:
        raise InvalidArgs(f"{where} {value[:60]!r} is malformed: {exc}") from None
    head = raw[:2]
    if head != ED25519_PUB:
        kind = OTHER_KEY_TYPES.get(head, f"multicodec 0x{raw[:2].hex() or 'empty'}")
        raise KeyTypeError(f"{where} is a {kind} key; only Ed25519 (multicodec 0xed 0x01) can sign toolkits")
    key = raw[2:]
    if len(key) != 32:
        raise InvalidArgs(f"{where} carries {len(key)} key bytes; an Ed25519 public key is 32")
    return key


def public_key_from_did(did: str) -> bytes:
    """Decode the Ed25519 public key straight from a ``did:key`` (no resolution)."""
    did = did.strip()
    if not did.startswith(DID_KEY_PREFIX):
        raise InvalidArgs(f"{did[:60]!r} is not a did:key (expected did:key:z6Mk…)")
    ident = did[len(DID_KEY_PREFIX):].split("#", 1)[0]
    return decode_multikey(ident, where=f"did:key {did[:60]!r}")


def _decode_seed(text: str) -> bytes:
    cleaned = text.strip()
    pad = "=" * (-len(cleaned) % 4)
    for decoder in (base64.b64decode, base64.urlsafe_b64decode):
        try:
            raw = decoder(cleaned + pad)
        except (binascii.Error, ValueError):
            continue
        if len(raw) == 32:
            return raw
    # The value is a secret: say what is wrong, never echo it.
    raise InvalidArgs(f"{ENV_SIGNING_KEY} must be base64 of a 32-byte Ed25519 seed (the value given is not)")


@dataclass(frozen=True)
class Identity:
    """One signing key. ``source`` says where it came from (a path, or the env var)."""

    seed: bytes
    source: str
    tenant: str = "default"

    def __repr__(self) -> str:  # never show the seed
        return f"Identity(did={self.did!r}, source={self.source!r})"

    @property
    def public_key(self) -> bytes:
        from nacl.signing import SigningKey

        return bytes(SigningKey(self.seed).verify_key)

    @property
    def did(self) -> str:
        return did_key(self.public_key)

    def sign(self, message: bytes) -> bytes:
        """A 64-byte detached Ed25519 signature."""
        from nacl.signing import SigningKey

        return bytes(SigningKey(self.seed).sign(message).signature)

    @classmethod
    def from_seed(cls, seed: bytes, source: str = "seed", tenant: str = "default") -> Identity:
        if len(seed) != 32:
            raise InvalidArgs(f"an Ed25519 seed is 32 bytes, not {len(seed)}")
        return cls(bytes(seed), source, tenant)


def verify(did_or_key: str | bytes, message: bytes, signature: bytes) -> bool:
    """True when ``signature`` is a valid Ed25519 signature of ``message`` by the key."""
    from nacl.exceptions import BadSignatureError
    from nacl.signing import VerifyKey

    key = public_key_from_did(did_or_key) if isinstance(did_or_key, str) else did_or_key
    if len(signature) != 64:
        return False
    try:
        VerifyKey(key).verify(message, signature)
    except BadSignatureError:
        return False
    return True


def key_path(home: Path, tenant: str = "default") -> Path:
    if not TENANT_RE.match(tenant):
        raise InvalidArgs(f"tenant {tenant!r} must match {TENANT_RE.pattern}")
    return home / "identity" / f"{tenant}.ed25519"


def _read_key_file(path: Path) -> bytes:
    # The home is trusted, so a link is followed (a key kept on a secrets mount), but only a
    # regular file is read, and only as much as a key takes: a FIFO or a device is refused.
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                raise InvalidArgs(f"{path} is not a regular file; move it aside to create a new key")
            text = fh.read(MAX_KEY_FILE_BYTES).decode("ascii")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidArgs(f"cannot read the signing key {path}: {exc}") from None
    try:
        raw = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != 32:
        raise InvalidArgs(f"{path} is not a base64 32-byte Ed25519 seed; move it aside to create a new key")
    return raw


def _create_key_file(path: Path) -> None:
    """Write a fresh seed so that no reader ever sees a partial or second key."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(path.parent, 0o700)
    tmp = path.parent / f".{path.name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="ascii") as fh:
            fh.write(base64.b64encode(os.urandom(32)).decode() + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        try:
            # link(2) fails if the key already exists: the first writer wins, nobody clobbers.
            os.link(tmp, path)
        except FileExistsError:
            pass
    finally:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass


def load(home: Path, env: Mapping[str, str] | None = None, *, tenant: str = "default",
         create: bool = True) -> Identity:
    """The tenant's identity: ``WB_SIGNING_KEY`` if set, else the stored key (created if absent)."""
    env = os.environ if env is None else env
    override = env.get(ENV_SIGNING_KEY)
    if override:
        return Identity(_decode_seed(override), f"${ENV_SIGNING_KEY}", tenant)
    path = key_path(home, tenant)
    if not path.exists():
        if not create:
            raise InvalidArgs(f"no signing key at {path} (run: wbx identity show)")
        _create_key_file(path)
    return Identity(_read_key_file(path), str(path), tenant)
