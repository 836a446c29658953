"""Ansible Vault: read `ansible-vault`-encrypted files and `!vault` values with the vault password file.

People keep their fleet's tokens in vault files (group_vars/all/vault.yml) or `!vault` values, so the
engine reads them as Ansible does, with the published format and the `cryptography` library (paramiko
already needs it), not a cipher of our own:

    $ANSIBLE_VAULT;1.1;AES256            (1.2 adds ";VAULT_ID")
    hex( hex(salt) \\n hex(hmac) \\n hex(ciphertext) ), wrapped in lines

PBKDF2-HMAC-SHA256 over the password and salt, 10000 iterations, gives 80 bytes: the AES-256-CTR key,
the HMAC-SHA256 key (over the ciphertext) and the 16-byte counter block; the plaintext is PKCS#7-padded.

The password comes from the file given by `use_password_file` (the CLI's --vault-password-file), else
ANSIBLE_VAULT_PASSWORD_FILE. As in Ansible, the file's content stripped of surrounding whitespace is the
password, and an executable file is run (no arguments, no shell) and its output, less the line end, is.
Vault-id client scripts (`*-client`, which expect --vault-id arguments) are refused.

Every decrypted value is a secret whatever its variable's name: `revealed()` lists them and
engine/template/secrets.py masks them in everything shown or reported.
"""

from __future__ import annotations

import os
import subprocess
import threading
from binascii import Error as BinasciiError
from binascii import unhexlify
from pathlib import Path

from engine.errors import UserError

HEADER = "$ANSIBLE_VAULT"
ENV_VAR = "ANSIBLE_VAULT_PASSWORD_FILE"
_KEY_BYTES, _IV_BYTES, _ITERATIONS = 32, 16, 10000
_SCRIPT_TIMEOUT_S = 60
_MAX_PASSWORD_FILE_BYTES = 64 * 1024

_lock = threading.Lock()
_state: dict = {"file": None, "explicit": False, "password": None}
_revealed: set[str] = set()
_revealed_version = [0]
_keys: dict[tuple[bytes, bytes], tuple[bytes, bytes, bytes]] = {}


class VaultError(UserError):
    """A vault value or file that cannot be read: no password, a wrong one, or a damaged envelope."""


def use_password_file(path: str | None) -> None:
    """Set the process's vault password file; None means ANSIBLE_VAULT_PASSWORD_FILE (read when needed)."""
    with _lock:
        _state.update(file=str(path) if path else None, explicit=bool(path), password=None)
        _keys.clear()


def password_file() -> str | None:
    """The password file in use: the one given, else the environment's, else None."""
    return _state["file"] or os.environ.get(ENV_VAR) or None


def is_encrypted(text: str | bytes) -> bool:
    """Vault text starts with the $ANSIBLE_VAULT header (after leading whitespace)."""
    head = text.lstrip()[: len(HEADER)]
    return (head.decode("ascii", "replace") if isinstance(head, bytes) else head) == HEADER


def revealed() -> tuple[int, frozenset[str]]:
    """(version, every plaintext decrypted so far): the secrets module re-reads them when the version moves."""
    with _lock:
        return _revealed_version[0], frozenset(_revealed)


def remember_secret(text: str) -> None:
    """Record a plaintext (or a value inside one) as a secret to mask."""
    if not text:
        return
    with _lock:
        if text not in _revealed:
            _revealed.add(text)
            _revealed_version[0] += 1


def forget_revealed() -> None:
    """Drop every remembered plaintext: one process running unrelated runs in turn (the test suite) starts each
    from a clean slate, as separate CLI processes do."""
    with _lock:
        _revealed.clear()
        _revealed_version[0] += 1


def decrypt(vault_text: str, where: str) -> str:
    """The plaintext of one vault envelope (a file's text or a `!vault` value); `where` names it in errors."""
    # cryptography is imported only when a vault value is met: every other run skips its import time.
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes, padding
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
    from cryptography.hazmat.primitives.hmac import HMAC

    version, cipher, vault_id, body = _parse_envelope(vault_text, where)
    salt, mac, ciphertext = _parse_body(body, where)
    password = _password(where)
    key, mac_key, iv = _derive(password, salt)
    check = HMAC(mac_key, hashes.SHA256())
    check.update(ciphertext)
    try:
        check.verify(mac)
    except InvalidSignature:
        raise _wrong_password(where, vault_id) from None
    decryptor = Cipher(algorithms.AES(key), modes.CTR(iv)).decryptor()
    unpadder = padding.PKCS7(128).unpadder()
    try:
        plain = unpadder.update(decryptor.update(ciphertext) + decryptor.finalize()) + unpadder.finalize()
        text = plain.decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        raise VaultError(f"{where}: the vault data decrypts to something that is not UTF-8 text; re-encrypt it "
                         "with ansible-vault encrypt.") from None
    remember_secret(text)
    return text


def _parse_envelope(text: str, where: str) -> tuple[str, str, str | None, str]:
    """Header fields and the hex body (its lines joined); a damaged header says what is expected."""
    lines = text.strip().splitlines()
    fields = [f.strip() for f in lines[0].split(";")] if lines else []
    if len(fields) < 3 or fields[0] != HEADER or fields[1] not in ("1.1", "1.2"):
        raise VaultError(
            f"{where}: the value does not start with a vault header this tool reads (its text is not shown: it may "
            "be a secret); expected "
            "'$ANSIBLE_VAULT;1.1;AES256' or '$ANSIBLE_VAULT;1.2;AES256;VAULT_ID' as ansible-vault writes it."
        )
    if fields[2] != "AES256":
        raise VaultError(f"{where}: vault cipher {fields[2]!r} is not supported (only AES256, what ansible-vault "
                         "writes); re-encrypt it with ansible-vault rekey.")
    vault_id = fields[3] if len(fields) > 3 else None
    return fields[1], fields[2], vault_id, "".join(line.strip() for line in lines[1:])


def _parse_body(body: str, where: str) -> tuple[bytes, bytes, bytes]:
    try:
        salt_hex, mac_hex, cipher_hex = unhexlify(body).split(b"\n", 2)
        return unhexlify(salt_hex), unhexlify(mac_hex), unhexlify(cipher_hex)
    except (BinasciiError, ValueError):
        raise VaultError(f"{where}: the vault data is damaged (it is not the hex text ansible-vault writes); "
                         "restore it from version control or re-encrypt the value.") from None


def _derive(password: bytes, salt: bytes) -> tuple[bytes, bytes, bytes]:
    """AES key, HMAC key and counter block; cached per (password, salt): PBKDF2 is slow on purpose."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.pbkdf2 import PBKDF2HMAC

    cached = _keys.get((password, salt))
    if cached is None:
        kdf = PBKDF2HMAC(algorithm=hashes.SHA256(), length=2 * _KEY_BYTES + _IV_BYTES, salt=salt, iterations=_ITERATIONS)
        raw = kdf.derive(password)
        cached = raw[:_KEY_BYTES], raw[_KEY_BYTES : 2 * _KEY_BYTES], raw[2 * _KEY_BYTES :]
        _keys[(password, salt)] = cached
    return cached


def _password(where: str) -> bytes:
    """The vault password, read (or the script run) once per process."""
    with _lock:
        if _state["password"] is None:
            _state["password"] = _read_password(where)
        return _state["password"]


def _read_password(where: str) -> bytes:
    path = password_file()
    if not path:
        raise VaultError(
            f"{where} is vault-encrypted and no vault password file is given; pass --vault-password-file FILE "
            f"(or set {ENV_VAR}) naming a file that holds the password (ansible-vault's own). Nothing was changed."
        )
    source = f"vault password file {path}" + ("" if _state["explicit"] else f" (from {ENV_VAR})")
    file = Path(path).expanduser()
    if not file.is_file():
        raise VaultError(f"{where} is vault-encrypted but the {source} does not exist or is not a file; "
                         "fix the path. Nothing was changed.")
    if os.access(file, os.X_OK):
        password = _run_password_script(file, source)
    else:
        try:
            with open(file, "rb") as fh:
                password = fh.read(_MAX_PASSWORD_FILE_BYTES).strip()
        except OSError as exc:
            raise VaultError(f"cannot read the {source}: {exc.strerror}; fix its permissions.") from None
    if not password:
        raise VaultError(f"the {source} is empty; put the vault password in it. Nothing was changed.")
    return password


def _run_password_script(file: Path, source: str) -> bytes:
    """An executable password file is a script whose output is the password, as in Ansible."""
    if file.stem.endswith("-client"):
        raise VaultError(f"the {source} is a vault-id client script (its name ends in -client); those are not "
                         "supported. Use a plain script that prints the password, or a file holding it.")
    try:
        proc = subprocess.run([str(file.resolve())], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,  # noqa: S603
                              timeout=_SCRIPT_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        reason = f"it did not finish within {_SCRIPT_TIMEOUT_S}s" if isinstance(exc, subprocess.TimeoutExpired) else str(exc)
        raise VaultError(f"the {source} is executable, so it is run for the password, and {reason}; fix the "
                         "script, or remove its executable bit if the file holds the password itself.") from None
    if proc.returncode:
        raise VaultError(f"the {source} is executable, so it is run for the password, and it exited with "
                         f"{proc.returncode}; fix the script, or remove its executable bit if the file holds "
                         "the password itself.")
    return proc.stdout.strip(b"\r\n")


def _wrong_password(where: str, vault_id: str | None) -> VaultError:
    path = password_file()
    source = f"the vault password file {path}" + ("" if _state["explicit"] else f" (from {ENV_VAR})")
    label = f" (vault id {vault_id!r})" if vault_id else ""
    return VaultError(
        f"{where}: the vault password from {source} does not decrypt this vault data{label}; it was encrypted "
        "with another password. Give the right file with --vault-password-file (only one vault password is "
        "supported), or re-encrypt the data with ansible-vault rekey. Nothing was changed."
    )
