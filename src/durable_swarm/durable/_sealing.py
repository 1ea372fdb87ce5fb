"""Encryption at rest: how a stored payload is sealed and opened, and the keys that do it.

One module for every store (DBOS's payloads through `_log.JsonSerializer`, this library's own
tables, and any table added later): `seal(obj) -> str` and `open_sealed(text) -> obj`.

Keys come from `DURABLE_SWARM_ENCRYPTION_KEY` or are given in code (`configure`, which
`DurableSwarm(encryption_key=...)`, `DurableClient(..., encryption_key=...)` and the worker call):
a comma-separated list (or a Python list) of `id:key` items, each key 16, 24 or 32 bytes in
base64 (standard or URL-safe); an item without `id:` gets the id `k` + the first 8 hex digits of
the key's SHA-256. The first key seals, every key opens: rotating means putting a new key first
and keeping the old ones until `durable-swarm encryption rotate` has re-sealed what they sealed.

A sealed text is `dsx1.<key id>.<base64url(nonce + ciphertext + tag)>`: AES-GCM (from the
`cryptography` package, the `crypto` extra) with a random 96-bit nonce per payload, over the
JSON text of the value, with associated data binding the format marker, the key id and what the
caller binds (e.g. a run id): a text moved under another key id, or another binding, or changed
by one bit, does not open (`EncryptionKeyError`), it never opens as something else.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
import re
import secrets
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import DurableSwarmError, EncryptionKeyError

__all__ = [
    "ENV_VAR",
    "MARKER",
    "Keyring",
    "SealedValue",
    "configure",
    "is_sealed",
    "key_id_of",
    "keyring",
    "new_key",
    "open_sealed",
    "require",
    "seal",
    "sealed_key_id",
]

ENV_VAR = "DURABLE_SWARM_ENCRYPTION_KEY"
MARKER = "dsx1"
_NONCE = 12
_KEY_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
_INSTALL = "pip install 'durable-swarm[crypto]'"


def _aesgcm(key: bytes) -> Any:
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError:
        raise EncryptionKeyError(
            "",
            message=(
                f"An encryption key is set ({ENV_VAR} or encryption_key=...), but the "
                f"`cryptography` package is not installed: {_INSTALL}, or unset the key."
            ),
        ) from None
    return AESGCM(key)


def _decode_key(text: str) -> bytes:
    raw = text.strip()
    padded = raw + "=" * (-len(raw) % 4)
    try:
        key = base64.b64decode(padded.replace("-", "+").replace("_", "/"), validate=True)
    except (binascii.Error, ValueError):
        key = b""
    if len(key) not in (16, 24, 32):
        raise DurableSwarmError(
            f"An encryption key must be 16, 24 or 32 bytes in base64 (got {len(raw)} characters "
            f"that are not one). Make one with `durable-swarm encryption new-key`."
        )
    return key


def key_id_of(key: bytes) -> str:
    """The id a key given without one gets: `k` + the first 8 hex digits of its SHA-256."""
    return "k" + hashlib.sha256(key).hexdigest()[:8]


def new_key(key_id: str | None = None) -> str:
    """A new random 256-bit key as `id:base64` (the id `key_id`, else derived from the key)."""
    key = secrets.token_bytes(32)
    return f"{key_id or key_id_of(key)}:{base64.urlsafe_b64encode(key).decode()}"


class Keyring:
    """Encryption keys by id: the first seals, all open. Built from `id:key` items."""

    def __init__(self, items: Sequence[str]) -> None:
        self._keys: dict[str, Any] = {}
        self.ids: list[str] = []
        for item in items:
            item = item.strip()
            if not item:
                continue
            key_id, sep, encoded = item.rpartition(":")
            key = _decode_key(encoded if sep else item)
            key_id = key_id.strip() if sep else key_id_of(key)
            if not _KEY_ID.fullmatch(key_id):
                raise DurableSwarmError(
                    f"The encryption key id {key_id!r} must be 1-64 letters, digits, '_' or '-'."
                )
            if key_id in self._keys:
                raise DurableSwarmError(
                    f"The encryption key id {key_id!r} is given twice; each key needs its own id."
                )
            self._keys[key_id] = _aesgcm(key)
            self.ids.append(key_id)
        if not self.ids:
            raise DurableSwarmError(
                "The encryption key list is empty; give at least one key (id:base64), or none."
            )

    @property
    def primary(self) -> str:
        """The id of the key that seals."""
        return self.ids[0]

    def has(self, key_id: str) -> bool:
        """Whether this keyring holds the key `key_id`."""
        return key_id in self._keys

    def seal_bytes(self, data: bytes, bind: str = "") -> str:
        """`data` sealed with the first key (see the module docstring)."""
        key_id = self.ids[0]
        nonce = os.urandom(_NONCE)
        sealed = self._keys[key_id].encrypt(nonce, data, _associated(key_id, bind))
        return f"{MARKER}.{key_id}.{base64.urlsafe_b64encode(nonce + sealed).decode()}"

    def open_bytes(self, text: str, bind: str = "", run_id: str | None = None) -> bytes:
        """The bytes `text` seals; `EncryptionKeyError` if no key here opens it."""
        key_id, blob = _parts(text, run_id)
        cipher = self._keys.get(key_id)
        if cipher is None:
            raise EncryptionKeyError(
                f"it was encrypted with the key {key_id!r}, which this process has not got "
                f"(it has {', '.join(repr(k) for k in self.ids)})",
                key_id=key_id,
                run_id=run_id,
            )
        from cryptography.exceptions import InvalidTag

        try:
            data: bytes = cipher.decrypt(blob[:_NONCE], blob[_NONCE:], _associated(key_id, bind))
        except InvalidTag:
            raise EncryptionKeyError(
                f"the key {key_id!r} here does not open it: the key of that id is not the one "
                "that encrypted it, or the stored data was changed",
                key_id=key_id,
                run_id=run_id,
            ) from None
        return data


def _associated(key_id: str, bind: str) -> bytes:
    return f"durable-swarm/{MARKER}/{key_id}/{bind}".encode()


def _parts(text: str, run_id: str | None) -> tuple[str, bytes]:
    marker, _, rest = text.partition(".")
    key_id, _, encoded = rest.partition(".")
    try:
        blob = base64.urlsafe_b64decode(encoded.encode())
    except (binascii.Error, ValueError):
        blob = b""
    if marker != MARKER or not key_id or len(blob) < _NONCE + 16:
        raise EncryptionKeyError(
            "the stored text is not a sealed payload this library wrote (it was changed or cut)",
            key_id=key_id or None,
            run_id=run_id,
        )
    return key_id, blob


def is_sealed(value: Any) -> bool:
    """Whether `value` is a sealed text (`seal`'s output)."""
    return isinstance(value, str) and value.startswith(MARKER + ".")


def sealed_key_id(text: str) -> str:
    """The id of the key that sealed `text`."""
    return text.split(".", 2)[1]


@dataclass
class _Configured:
    items: tuple[str, ...] | None = None  # None: the environment decides
    ring: Keyring | None = None
    source: tuple[str, ...] | None = None  # the items `ring` was built from


_state = _Configured()
_lock = threading.Lock()


def _items(key: str | Sequence[str]) -> tuple[str, ...]:
    if isinstance(key, str):
        return tuple(part for part in key.split(",") if part.strip())
    return tuple(key)


def configure(key: str | Sequence[str] | None) -> None:
    """Use `key` (an `id:key` list, as a comma-separated string or a sequence) in this process
    for every payload sealed or opened from now on; None: `DURABLE_SWARM_ENCRYPTION_KEY` again.
    One keyring per process (as one run database per process): the last call wins."""
    items = None if key is None else _items(key)
    ring = Keyring(items) if items else None  # a bad key is refused here, not at first use
    with _lock:
        _state.items, _state.ring, _state.source = items, ring, items


def keyring() -> Keyring | None:
    """The keys of this process (`configure`, else the environment); None: no encryption."""
    items = _state.items
    if items is None:
        items = _items(os.environ.get(ENV_VAR, ""))
    if not items:
        return None
    if _state.source == items and _state.ring is not None:
        return _state.ring
    ring = Keyring(items)
    with _lock:
        _state.ring, _state.source = ring, items
    return ring


def seal(obj: Any, *, bind: str = "", ring: Keyring | None = None) -> str:
    """`obj` (JSON data) as a sealed text, with this process's first key (or `ring`'s).

    Raises:
        EncryptionKeyError: no key is configured.
    """
    ring = ring or keyring()
    if ring is None:
        raise EncryptionKeyError("", message=f"No encryption key is set ({ENV_VAR}).")
    return ring.seal_bytes(json.dumps(obj, separators=(",", ":")).encode(), bind)


def open_sealed(
    text: str, *, bind: str = "", run_id: str | None = None, ring: Keyring | None = None
) -> Any:
    """The JSON data `text` seals (`seal`'s inverse).

    Raises:
        EncryptionKeyError: no key here opens it (naming `run_id` and the key id it needs).
    """
    ring = ring or keyring()
    if ring is None:
        key_id = sealed_key_id(text) if is_sealed(text) else None
        raise EncryptionKeyError("no encryption key is set here", key_id=key_id, run_id=run_id)
    return json.loads(ring.open_bytes(text, bind, run_id))


class SealedValue(dict[str, Any]):
    """What a sealed payload reads as where its key is missing: only its fields that are not
    encrypted (agent names, usage, costs, what a run waits for), and the id of the key needed.
    Code that needs the contents calls `require`."""

    key_id: str

    def __init__(self, public: Any, key_id: str) -> None:
        super().__init__(public if isinstance(public, dict) else {})
        self.key_id = key_id


def require(value: Any, run_id: str | None, what: str = "its contents") -> None:
    """Raise `EncryptionKeyError` if `value` is a `SealedValue` (its key is missing here)."""
    if isinstance(value, SealedValue):
        raise EncryptionKeyError(
            f"{what} are encrypted and this process has not got the key",
            key_id=value.key_id,
            run_id=run_id,
        )
