"""Signed cache entries (issue 47): an HMAC under a key kept in the cache folder
(`keys/cache.key`, mode 0600) that only processes which never load a candidate read. A worker
never receives the key, so an entry it rewrote no longer verifies. harness/trusted_cache.py
decides what is kept; harness/peer_cache.py stores peer and baseline times this way."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
from pathlib import Path
from typing import Any

from harness.caches import cache_root

# The key of this process, once read, and the file it was read from (the cache folder can change
# within a process: SOCRATIC_CACHE_DIR set anew): only executor-side code calls signing_key().
_KEY: bytes | None = None
_KEY_AT: Path | None = None


def key_path() -> Path:
    return cache_root() / "keys" / "cache.key"


def signing_key() -> bytes:
    """The cache folder's key, made on first use (32 random bytes, 0600)."""
    global _KEY, _KEY_AT
    path = key_path()
    if _KEY is None or path != _KEY_AT:
        _KEY, _KEY_AT = _read_or_make(path), path
    return _KEY


KEY_BYTES = 32


def _read_key(path: Path) -> bytes | None:
    """The key in `path`, None where there is no file; a file that holds no key is an error to
    report (a process never sees a half-written key: _read_or_make links a whole file in place)."""
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return None
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(key) != KEY_BYTES:
        raise ValueError(f"the cache's signing key {path} does not hold a {KEY_BYTES}-byte key: delete it (the "
                         "signed entries of this cache folder are then timed again)")
    return key


def _read_or_make(path: Path) -> bytes:
    key = _read_key(path)
    if key is not None:
        return key
    path.parent.mkdir(parents=True, exist_ok=True)
    key = secrets.token_bytes(KEY_BYTES)
    # Written whole under a name of this process's own, then linked in place: a process that
    # reads the key file finds all of it or none (it would take an empty file for an empty key).
    draft = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(key.hex())
        try:
            os.link(draft, path)
        except FileExistsError:  # another process made it meanwhile: its key is the folder's
            made = _read_key(path)
            if made is None:  # made and deleted again meanwhile: a folder being cleared
                raise RuntimeError(f"the cache's signing key {path} appeared and vanished while this "
                                   "process made one") from None
            return made
        return key
    finally:
        draft.unlink(missing_ok=True)


def _mac(entry: dict[str, Any], key: bytes) -> str:
    return hmac.new(key, json.dumps(entry, sort_keys=True).encode(), hashlib.sha256).hexdigest()


def sign(entry: dict[str, Any]) -> dict[str, Any]:
    return {"entry": entry, "hmac": _mac(entry, signing_key())}


class Rejected(ValueError):
    """A cache file whose signature does not match: rewritten by a process without the key."""


def verify(data: Any) -> dict[str, Any] | None:
    """The entry of a signed record; None for what is not one; Rejected where the signature is wrong."""
    if not isinstance(data, dict) or not isinstance(data.get("entry"), dict) or not isinstance(data.get("hmac"), str):
        raise Rejected("not a signed entry")
    if not hmac.compare_digest(_mac(data["entry"], signing_key()), data["hmac"]):
        raise Rejected("signature mismatch")
    return data["entry"]


def read_signed(path: Path) -> dict[str, Any] | None:
    """A verified entry, None where the file is missing or unreadable; Rejected where tampered."""
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return verify(raw)


def entries_in(folder: Path, pattern: str, keep: Any = None) -> tuple[dict[str, dict[str, Any]], int]:
    """Every verified entry of `folder` matching `pattern` (and `keep(entry)`), by file stem; with
    the number of files rejected for a bad signature."""
    found: dict[str, dict[str, Any]] = {}
    rejected = 0
    if not folder.is_dir():
        return found, 0
    for path in folder.glob(pattern):
        try:
            entry = read_signed(path)
        except Rejected:
            rejected += 1
            continue
        if entry is not None and (keep is None or keep(entry)):
            found[path.stem] = entry
    return found, rejected


def write_signed(path: Path, entry: dict[str, Any]) -> None:
    """Atomically; a cache that cannot be written only costs a later measurement."""
    import tempfile

    tmp: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(sign(entry), f)
        os.replace(tmp, path)
    except OSError:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
