"""Ed25519 keys and the detached signature of a registry index.

Why: the index lists the sha256 of every library a pull will later load, so whoever can
change the index can run code on the puller's machine. The publisher signs the index's exact
bytes with a private key; a puller accepts an index only when a key it trusts verifies that
signature (keys from `--trusted-key`, `$VLLM_TVM_TRUSTED_KEYS` and the config directory's
`trusted_keys/*.pub`), and an unsigned or wrongly signed index is refused unless the user
explicitly allows unsigned registries.
"""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Iterable
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from vllm_tvm.artifact_registry.index import RegistryError

TRUSTED_KEYS_ENV = "VLLM_TVM_TRUSTED_KEYS"
"""Public key files to trust, separated by the path separator (`:`)."""
CONFIG_DIR_ENV = "VLLM_TVM_CONFIG_DIR"
"""The configuration directory (default ~/.config/vllm_tvm); its `trusted_keys/*.pub` are
trusted."""


def config_dir() -> Path:
    configured = os.environ.get(CONFIG_DIR_ENV)
    return Path(configured) if configured else Path.home() / ".config" / "vllm_tvm"


def generate_keypair(key_file: Path) -> Path:
    """Write a new private key to `key_file` (PEM, owner-only) and its public key to
    `key_file.pub`; an existing key file is never overwritten. Returns the public key path."""
    public_file = key_file.with_name(key_file.name + ".pub")
    for path in (key_file, public_file):
        if path.exists():
            raise RegistryError(f"{path} exists; refusing to overwrite a key")
    private = Ed25519PrivateKey.generate()
    pem = private.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    key_file.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as stream:
        stream.write(pem)
    public_file.write_bytes(_public_pem(private.public_key()))
    return public_file


def sign(key_file: Path, data: bytes) -> bytes:
    """The detached signature of `data` (base64 of the 64 ed25519 bytes, newline-ended)."""
    private = _load_private(key_file)
    return base64.b64encode(private.sign(data)) + b"\n"


def key_fingerprint(public_key: Ed25519PublicKey) -> str:
    """A short name of a public key for messages (`ed25519:` + 16 hex of its sha256)."""
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return "ed25519:" + hashlib.sha256(raw).hexdigest()[:16]


def trusted_key_files(given: Iterable[Path] = ()) -> list[Path]:
    """The public key files to trust: `given`, then $VLLM_TVM_TRUSTED_KEYS, then the config
    directory's trusted_keys/*.pub."""
    files = list(given)
    files += [Path(p) for p in os.environ.get(TRUSTED_KEYS_ENV, "").split(os.pathsep) if p]
    files += sorted((config_dir() / "trusted_keys").glob("*.pub"))
    return files


def verify_index(
    data: bytes, signature: bytes | None, key_files: Iterable[Path], allow_unsigned: bool
) -> str:
    """Check the index's signature against the trusted keys; returns who signed it (or why it
    was accepted unsigned). Refuses a missing or unverifiable signature unless
    `allow_unsigned`."""
    keys = [_load_public(path) for path in key_files]
    if signature is None:
        problem = "the registry index is not signed (no index.json.sig)"
    elif not keys:
        problem = (
            "no trusted key to check the registry index's signature with; pass --trusted-key "
            f"KEYFILE.pub, set ${TRUSTED_KEYS_ENV}, or add it to "
            f"{config_dir() / 'trusted_keys'}"
        )
    else:
        raw = _decode_signature(signature)
        for key in keys:
            try:
                key.verify(raw, data)
            except InvalidSignature:
                continue
            return f"signed by {key_fingerprint(key)}"
        names = ", ".join(key_fingerprint(k) for k in keys)
        problem = f"the registry index's signature verifies with none of the trusted keys ({names})"
    if allow_unsigned:
        return f"accepted without a valid signature (--allow-unsigned): {problem}"
    raise RegistryError(f"{problem}; refusing it (--allow-unsigned accepts it anyway)")


def _decode_signature(signature: bytes) -> bytes:
    try:
        return base64.b64decode(signature.strip(), validate=True)
    except ValueError:
        return b""


def _public_pem(key: Ed25519PublicKey) -> bytes:
    return key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def _load_private(key_file: Path) -> Ed25519PrivateKey:
    try:
        key = serialization.load_pem_private_key(key_file.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as err:
        raise RegistryError(f"signing key {key_file} cannot be read: {err}") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise RegistryError(f"signing key {key_file} is not an ed25519 key")
    return key


def _load_public(key_file: Path) -> Ed25519PublicKey:
    try:
        key = serialization.load_pem_public_key(Path(key_file).read_bytes())
    except (OSError, ValueError) as err:
        raise RegistryError(f"trusted key {key_file} cannot be read: {err}") from None
    if not isinstance(key, Ed25519PublicKey):
        raise RegistryError(f"trusted key {key_file} is not an ed25519 public key")
    return key
