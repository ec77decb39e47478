"""`apr keygen | sign | verify | encrypt | decrypt`: signed and encrypted models
(seed 003 §5, ARCHITECTURE §4), for APR v2 files (and manifests) and APR v1 files.

    apr keygen -o KEY                         writes KEY (0600) and KEY.pub
    apr sign MODEL --key KEY -o OUT
    apr verify MODEL [--trusted-key KEY.pub]
    apr encrypt MODEL (--password-env VAR | --password-file F | --recipient KEY.pub) -o OUT
    apr decrypt MODEL (--password-env VAR | --password-file F | --key KEY) -o OUT

Secrets never reach the output or error messages; passwords come from an environment
variable, a file, or a no-echo prompt on a terminal.
"""
from __future__ import annotations

import argparse
import getpass
import os
import sys
from typing import Any, Dict, Optional

from apr_core.atomic import atomic_output
from apr_core.crypto import keys
from apr_core.errors import AprError, ErrorCode
from apr_core.formats.detect import APR1, APR2, detect_format
from apr_core.io import open_source

from .common import emit_json, resolve_model


def _read_text(path: str, what: str) -> str:
    try:
        with open(path, "r", encoding="utf-8") as handle:
            return handle.read()
    except OSError as exc:
        raise AprError(ErrorCode.IO, "cannot read {}: {}".format(what, exc.strerror),
                       path=path) from None


def _fingerprint(public: bytes) -> str:
    return public.hex()[:16]


def _format_of(path: str) -> str:
    with open_source(path) as src:
        fmt = detect_format(src)
    if fmt not in (APR1, APR2):
        raise AprError(ErrorCode.UNSUPPORTED, "signing and encryption need an APR file "
                       "(convert it first)", format=fmt)
    return fmt


def _password(args: argparse.Namespace, confirm: bool) -> Optional[str]:
    if args.password_env:
        value = os.environ.get(args.password_env)
        if not value:
            raise AprError(ErrorCode.ARGUMENT, "password environment variable is unset or "
                           "empty", variable=args.password_env)
        return value
    if args.password_file:
        value = _read_text(args.password_file, "password file").rstrip("\r\n")
        if not value:
            raise AprError(ErrorCode.ARGUMENT, "password file is empty",
                           path=args.password_file)
        return value
    return None


def _prompt(confirm: bool) -> str:
    if not sys.stdin.isatty():
        raise AprError(ErrorCode.ARGUMENT, "no password or key given (use --password-env, "
                       "--password-file or a key option)")
    value = getpass.getpass("Password: ")
    if confirm and getpass.getpass("Repeat password: ") != value:
        raise AprError(ErrorCode.ARGUMENT, "passwords do not match")
    if not value:
        raise AprError(ErrorCode.ARGUMENT, "empty password")
    return value


def _report(args: argparse.Namespace, result: Dict[str, Any], line: str) -> int:
    if args.json:
        emit_json(result)
    else:
        print(line)
    return 0


def run_keygen(args: argparse.Namespace) -> int:
    pair = keys.generate()
    public_path = args.output + ".pub"
    with atomic_output(args.output, overwrite=args.force) as handle:
        os.chmod(handle.name, 0o600)
        handle.write(keys.format_secret(pair).encode("ascii"))
    with atomic_output(public_path, overwrite=args.force) as handle:
        handle.write(keys.format_public(pair.public).encode("ascii"))
    return _report(args, {"key": args.output, "public_key_file": public_path,
                          "public_key": pair.public.hex()},
                   "wrote {} and {} (key {})".format(args.output, public_path,
                                                     _fingerprint(pair.public)))


def run_sign(args: argparse.Namespace) -> int:
    path = resolve_model(args.model)
    pair = keys.parse_secret(_read_text(args.key, "key file"))
    if _format_of(path) == APR2:
        from apr_core.formats.apr2_sign import sign_apr2
        sign_apr2(path, args.output, pair, overwrite=args.force)
    else:
        from apr_core.formats.apr1 import sign_apr1_bytes
        with open_source(path) as src:
            data = sign_apr1_bytes(src.read(0, src.size), pair)
        with atomic_output(args.output, overwrite=args.force) as handle:
            handle.write(data)
    return _report(args, {"input": path, "output": args.output,
                          "public_key": pair.public.hex()},
                   "signed {} -> {} (key {})".format(path, args.output,
                                                     _fingerprint(pair.public)))


def run_verify(args: argparse.Namespace) -> int:
    path = resolve_model(args.model)
    trusted = None
    if args.trusted_key:
        trusted = keys.parse_public(_read_text(args.trusted_key, "trusted key file"))
    with open_source(path) as src:
        is_v1 = src.size >= 4 and src.read(0, 4) == b"APRN"
    if is_v1:
        from apr_core.formats.apr1 import L, read_apr1
        with read_apr1(path, verify=True, trusted_key=trusted) as model:
            if not model.apr1_flags & L.SIGNED:
                raise AprError(ErrorCode.SIGNATURE, "file is not signed")
            tail = model.source.read(model.source.size - 36, 32)
            result = {"status": model.signature_status, "public_key": tail.hex()}
    else:
        from apr_core.formats.apr2_sign import verify_apr2
        result = verify_apr2(path, trusted)
    result["path"] = path
    if result["status"] == "trusted":
        line = "OK: signature valid, signed by the trusted key {}".format(
            _fingerprint(bytes.fromhex(result["public_key"])))
    else:
        line = ("OK: signature valid (integrity only, provenance unknown: signed by {}; "
                "pass --trusted-key to check who signed it)".format(
                    _fingerprint(bytes.fromhex(result["public_key"]))))
    if "shards" in result:
        line += "; {} shard(s) match the signed manifest".format(result["shards"])
    return _report(args, result, line)


def run_encrypt(args: argparse.Namespace) -> int:
    path = resolve_model(args.model)
    recipient = None
    password = None
    if args.recipient:
        recipient = keys.parse_public(_read_text(args.recipient, "recipient key file"))
    else:
        password = _password(args, confirm=True) or _prompt(confirm=True)
    if _format_of(path) == APR2:
        from apr_core.formats.apr2 import read_apr2
        from apr_core.formats.apr2_encrypt import encrypt_apr2
        with read_apr2(path, verify=True) as model:
            encrypt_apr2(model, args.output, password=password, recipient=recipient,
                         overwrite=args.force)
    else:
        from apr_core.formats.apr1 import read_apr1, rewrite_apr1_bytes
        with read_apr1(path, verify=True) as model:
            if model.encrypted:
                raise AprError(ErrorCode.ARGUMENT, "file is already encrypted")
            data = rewrite_apr1_bytes(model, password, recipient)
        with atomic_output(args.output, overwrite=args.force) as handle:
            handle.write(data)
    mode = "recipient {}".format(_fingerprint(recipient)) if recipient else "password"
    return _report(args, {"input": path, "output": args.output,
                          "mode": "recipient" if recipient else "password"},
                   "encrypted {} -> {} ({})".format(path, args.output, mode))


def run_decrypt(args: argparse.Namespace) -> int:
    path = resolve_model(args.model)
    pair = None
    password = None
    if args.key:
        pair = keys.parse_secret(_read_text(args.key, "key file"))
    else:
        password = _password(args, confirm=False) or _prompt(confirm=False)
    if _format_of(path) == APR2:
        from apr_core.formats.apr2 import read_apr2
        from apr_core.formats.apr2_encrypt import decrypt_apr2
        with read_apr2(path, verify=True) as model:
            decrypt_apr2(model, args.output, password=password, key=pair,
                         overwrite=args.force)
    else:
        from apr_core.formats.apr1 import read_apr1, rewrite_apr1_bytes
        with read_apr1(path, verify=True, password=password, key=pair) as model:
            if not model.encrypted:
                raise AprError(ErrorCode.ARGUMENT, "file is not encrypted")
            data = rewrite_apr1_bytes(model)  # decrypts first: E005 before any output
        with atomic_output(args.output, overwrite=args.force) as handle:
            handle.write(data)
    return _report(args, {"input": path, "output": args.output},
                   "decrypted {} -> {}".format(path, args.output))


def _common(p: argparse.ArgumentParser, output: bool = True) -> None:
    if output:
        p.add_argument("-o", "--output", required=True, help="output file")
        p.add_argument("-f", "--force", action="store_true", help="overwrite the output")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def _password_options(p: argparse.ArgumentParser) -> argparse._MutuallyExclusiveGroup:
    group = p.add_mutually_exclusive_group()
    group.add_argument("--password-env", metavar="VAR",
                       help="read the password from environment variable VAR")
    group.add_argument("--password-file", metavar="FILE",
                       help="read the password from the first line of FILE")
    return group


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("keygen", help="create a key pair for signing and receiving "
                       "encrypted models (KEY and KEY.pub)")
    _common(p)
    p.set_defaults(func=run_keygen)

    p = sub.add_parser("sign", help="sign an APR file with an Ed25519 key")
    p.add_argument("model")
    p.add_argument("--key", required=True, help="secret key file from apr keygen")
    _common(p)
    p.set_defaults(func=run_sign)

    p = sub.add_parser("verify", help="check an APR file's signature (E006 when invalid)")
    p.add_argument("model")
    p.add_argument("--trusted-key", metavar="KEY.pub",
                   help="the signer's public key; without it the embedded key is used, "
                        "which proves integrity but not provenance")
    _common(p, output=False)
    p.set_defaults(func=run_verify)

    p = sub.add_parser("encrypt", help="encrypt an APR file's tensors (AES-256-GCM) for a "
                       "password (Argon2id) or a recipient's public key (X25519)")
    p.add_argument("model")
    group = _password_options(p)
    group.add_argument("--recipient", metavar="KEY.pub", help="recipient's public key file")
    _common(p)
    p.set_defaults(func=run_encrypt)

    p = sub.add_parser("decrypt", help="decrypt an encrypted APR file (E005 on a wrong "
                       "password or key; nothing is written then)")
    p.add_argument("model")
    group = _password_options(p)
    group.add_argument("--key", help="secret key file (recipient encryption)")
    _common(p)
    p.set_defaults(func=run_decrypt)
