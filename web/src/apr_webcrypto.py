"""apr_core's crypto provider backed by the browser: WebCrypto (Ed25519, AES-256-GCM,
X25519) and hash-wasm (Argon2id), reached through `aprCrypto` (web/src/webcrypto.js).

Registered by the worker at boot when the runtime can wait on promises from synchronous
code (Pyodide 314 with JSPI); elsewhere apr_core's own providers stay in charge.
"""
from __future__ import annotations

import json
from typing import Any, Callable

import js  # type: ignore[import-not-found]  # Pyodide's bridge to the worker's globals


def _bytes(value: Any) -> bytes:
    """A JS Uint8Array as Python bytes."""
    return value.to_bytes() if hasattr(value, "to_bytes") else bytes(value.to_py())


class WebCryptoProvider:
    """apr_core's crypto provider backed by WebCrypto (+ hash-wasm for Argon2id).

    The interface is synchronous and WebCrypto returns promises, so each call waits with
    `pyodide.ffi.run_sync`, which needs JSPI (stack switching) and a call that entered
    Python through `runPythonAsync` — which is how the worker calls everything here.
    """

    name = "webcrypto"
    capabilities = frozenset(("public_key_ed25519", "sign_ed25519", "verify_ed25519",
                              "encrypt_aes256gcm", "decrypt_aes256gcm", "argon2id",
                              "public_key_x25519", "x25519"))

    def __init__(self, run_sync: Callable[[Any], Any], to_js: Callable[[Any], Any]) -> None:
        self._run_sync = run_sync
        self._to_js = to_js

    def _call(self, operation: str, *args: Any) -> Any:
        js_args = [self._to_js(a) if isinstance(a, bytes) else a for a in args]
        return self._run_sync(getattr(js.aprCrypto, operation)(*js_args))

    def _bytes_or_fail(self, operation: str, *args: Any) -> bytes:
        from apr_core.crypto import DecryptionError
        result = self._call(operation, *args)
        if result is None:
            raise DecryptionError(operation)
        return _bytes(result)

    def public_key_ed25519(self, seed: bytes) -> bytes:
        return _bytes(self._call("public_key_ed25519", seed))

    def sign_ed25519(self, seed: bytes, message: bytes) -> bytes:
        return _bytes(self._call("sign_ed25519", seed, message))

    def verify_ed25519(self, public_key: bytes, message: bytes, signature: bytes) -> bool:
        return bool(self._call("verify_ed25519", public_key, message, signature))

    def encrypt_aes256gcm(self, key: bytes, nonce: bytes, plaintext: bytes, aad: bytes) -> bytes:
        return _bytes(self._call("encrypt_aes256gcm", key, nonce, plaintext, aad))

    def decrypt_aes256gcm(self, key: bytes, nonce: bytes, ciphertext: bytes, aad: bytes) -> bytes:
        return self._bytes_or_fail("decrypt_aes256gcm", key, nonce, ciphertext, aad)

    def argon2id(self, password: bytes, salt: bytes, m_cost: int, t_cost: int, p_cost: int,
                 length: int) -> bytes:
        return _bytes(self._call("argon2id", password, salt, m_cost, t_cost, p_cost, length))

    def public_key_x25519(self, private_key: bytes) -> bytes:
        return _bytes(self._call("public_key_x25519", private_key))

    def x25519(self, private_key: bytes, peer_public: bytes) -> bytes:
        return self._bytes_or_fail("x25519", private_key, peer_public)


def register_webcrypto() -> bool:
    """Register the WebCrypto provider when this Pyodide can wait on promises (JSPI)."""
    try:
        from pyodide.ffi import run_sync, to_js  # type: ignore[import-not-found]
    except ImportError:  # older Pyodide (0.17): apr_core's own providers are used
        return False
    from apr_core import crypto
    crypto.register_provider(WebCryptoProvider(run_sync, to_js))
    return True


def crypto_self_test(seed_hex: str, message_hex: str) -> str:
    """Sign and verify through the registered providers (for the shell's diagnostics)."""
    from apr_core import crypto
    seed, message = bytes.fromhex(seed_hex), bytes.fromhex(message_hex)
    public = crypto.public_key_ed25519(seed)
    signature = crypto.sign_ed25519(seed, message)
    return json.dumps({"provider": crypto.provider_for("verify_ed25519").name,
                       "public_key": public.hex(), "signature": signature.hex(),
                       "valid": crypto.verify_ed25519(public, message, signature)})


__all__ = ["WebCryptoProvider", "register_webcrypto", "crypto_self_test"]
