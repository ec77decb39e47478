"""The file-level checks of `apr qa`: format (THE validation of `apr validate`), checksum
and signature (apr_core's verifiers, as `apr verify` runs them)."""
from __future__ import annotations

import os
import struct
from typing import Any, Dict, List, Optional, Tuple

from apr_core.errors import AprError, ErrorCode
from apr_core.formats.detect import APR1, APR2, detect_format
from apr_core.formats.flags import SHARDED, SIGNED
from apr_core.io import open_source

from ..validate_cmd import validate_file
from . import FAIL, PASS, SKIP, Check, QaOptions

_APR2_FLAGS = struct.Struct("<I")       # header: magic, u16 major, u16 minor, u32 flags
_APR2_FLAGS_OFFSET = 8


def container(path: str) -> Tuple[str, int]:
    """(format name, APR2 header flags or 0); a directory is a SafeTensors checkpoint."""
    if os.path.isdir(path):
        return "safetensors directory", 0
    with open_source(path) as src:
        fmt = detect_format(src)
        flags = 0
        if fmt == APR2 and src.size >= _APR2_FLAGS_OFFSET + 4:
            (flags,) = _APR2_FLAGS.unpack(src.read(_APR2_FLAGS_OFFSET, 4))
    return fmt, flags


def file_checks(path: str, options: QaOptions) -> List[Check]:
    """[format, checksum, signature] for the file at `path` (those not in `options.skip`)."""
    wanted = [name for name in ("format", "checksum", "signature") if name not in options.skip]
    if not wanted:
        return []
    try:
        fmt, flags = container(path)
    except AprError as err:                     # not a model file at all
        return [Check(name, FAIL, str(err)) for name in wanted]
    report = validate_file(path, nan_check=True, shapes=True) \
        if {"format", "checksum"} & set(wanted) else None
    out = {"format": lambda: _format(report),
           "checksum": lambda: _checksum(report, fmt, flags),
           "signature": lambda: _signature(path, fmt, flags, options.trusted_key)}
    return [out[name]() for name in wanted]


def _format(report: Dict[str, Any]) -> Check:
    if report["problems"]:
        return Check("format", FAIL, report["problems"][0]["text"])
    errors = [f for f in report["findings"] if f["severity"] == "error"]
    if errors:
        return Check("format", FAIL, "{} tensor(s) fail: {}: {}".format(
            len(errors), errors[0]["tensor"], errors[0]["message"]))
    if report["shape_problems"]:
        return Check("format", FAIL, report["shape_problems"][0])
    return Check("format", PASS, "{} tensors decode, no NaN/Inf, shapes match the family "
                 "contract".format(report["tensors_checked"]))


def _checksum(report: Dict[str, Any], fmt: str, flags: int) -> Check:
    mismatch = [p for p in report["problems"] if p["code"] == ErrorCode.CHECKSUM.name]
    if mismatch:
        return Check("checksum", FAIL, mismatch[0]["text"])
    if fmt not in (APR1, APR2):
        return Check("checksum", SKIP, "{} carries no checksum (the format check decoded "
                     "every tensor instead)".format(fmt))
    if report["problems"]:
        return Check("checksum", SKIP, "not reached: the file does not open (see format)")
    what = "the CRC32 footer matches the file"
    if flags & SHARDED:
        what = "every shard matches the sha256 (or CRC32) its manifest pins"
    return Check("checksum", PASS, what)


def _signature(path: str, fmt: str, flags: int, trusted: Optional[bytes]) -> Check:
    """`apr verify`'s check: the embedded Ed25519 signature (integrity), and with a
    trusted key, that this key signed it (provenance)."""
    if fmt not in (APR1, APR2):
        if trusted is not None:
            return Check("signature", FAIL, "a trusted key is configured but {} files "
                         "carry no signature".format(fmt))
        return Check("signature", SKIP, "{} files carry no signature".format(fmt))
    try:
        signer, status = _verify(path, fmt, flags, trusted)
    except AprError as err:
        return Check("signature", FAIL, str(err))
    if signer is None:
        if trusted is not None:
            return Check("signature", FAIL, "unsigned, but a trusted key is configured")
        return Check("signature", SKIP, "unsigned (apr sign adds one)")
    if trusted is not None:
        return Check("signature", PASS, "valid, signed by the trusted key {}".format(signer))
    return Check("signature", PASS, "valid ({}: signed by {}; --trusted-key checks who "
                 "signed it)".format(status, signer))


def _verify(path: str, fmt: str, flags: int, trusted: Optional[bytes]
            ) -> Tuple[Optional[str], str]:
    """(signer fingerprint or None when unsigned, status); AprError(E006) when invalid."""
    if fmt == APR2:
        if not flags & SIGNED:
            return None, ""
        from apr_core.formats.apr2_sign import verify_apr2
        result = verify_apr2(path, trusted)
        return result["public_key"][:16], result["status"]
    from apr_core.formats.apr1 import L, read_apr1
    with read_apr1(path, verify=True, trusted_key=trusted) as model:
        if not model.apr1_flags & L.SIGNED:
            return None, ""
        tail = model.source.read(model.source.size - 36, 32)   # the embedded public key
        return tail.hex()[:16], str(model.signature_status)


__all__ = ["file_checks", "container"]
