"""`apr qa`'s checklist: what each check is, its outcome, and the options that set the gates.

    checks = run_checks(path, QaOptions(min_tok_s=10))     # runner.py
    passed = not any(c.status == FAIL for c in checks)

Each check ends `pass`, `fail` or `skip`, always with a detail saying why (a skip names what
is missing: no signature, no llama.cpp, no floor given). The checks live in
`file_checks.py` (format, checksum, signature), `model_checks.py` (load, tokenizer,
golden, perplexity, throughput, memory) and `llama_logits.py` (logits vs llama.cpp).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, FrozenSet, Optional

PASS, FAIL, SKIP = "pass", "fail", "skip"

# THE list of checks, in report order: name -> what it checks (shown by `apr qa --help`).
CHECKS: Dict[str, str] = {
    "format": "the file opens with full verification, every tensor decodes, no NaN/Inf, "
              "shapes match the family contract (apr validate --nan-check --shapes)",
    "checksum": "the format's own checksums (APR CRC32, a sharded manifest's per-shard "
                "sha256); skip for formats that have none (GGUF, SafeTensors)",
    "signature": "an Ed25519 signature, against --trusted-key / APR_TRUSTED_KEY when given; "
                 "skip when unsigned (fail if a trusted key demands one)",
    "load": "the runtime loads the model and its tokenizer (the engine apr run uses)",
    "tokenizer": "decode(encode(text)) returns a fixed multilingual + code text byte for byte",
    "golden": "the greedy completion of --golden-prompt contains --golden-expect",
    "logits": "next-token logits along the golden answer agree with llama.cpp's "
              "(GGUF only; skip without llama-cpp-python)",
    "perplexity": "perplexity on a built-in English text is at most --max-ppl",
    "throughput": "decode speed is at least --min-tok-s (skip when not given)",
    "memory": "peak RSS from loading through decoding is at most --max-rss-mb "
              "(skip when not given)",
}

DEFAULT_GOLDEN_PROMPT = "The capital of France is"
DEFAULT_GOLDEN_EXPECT = "Paris"
DEFAULT_MAX_PPL = 100.0


@dataclass(frozen=True)
class Check:
    """One line of the report."""

    name: str
    status: str          # PASS | FAIL | SKIP
    detail: str

    def to_dict(self) -> Dict[str, str]:
        return {"name": self.name, "status": self.status, "detail": self.detail}


@dataclass(frozen=True)
class QaOptions:
    """The gates and switches of one `apr qa` run (the command's flags)."""

    golden_prompt: str = DEFAULT_GOLDEN_PROMPT
    golden_expect: str = DEFAULT_GOLDEN_EXPECT
    golden_chat: bool = False             # through the chat template instead of raw
    max_ppl: float = DEFAULT_MAX_PPL
    min_tok_s: Optional[float] = None     # None: the throughput check reports, skips
    max_rss_mb: Optional[float] = None    # None: the memory check reports, skips
    skip: FrozenSet[str] = field(default_factory=frozenset)
    trusted_key: Optional[bytes] = None   # 32-byte Ed25519 public key
    backend: Optional[str] = None
    dequantize: bool = False


__all__ = ["CHECKS", "Check", "QaOptions", "PASS", "FAIL", "SKIP", "DEFAULT_GOLDEN_PROMPT",
           "DEFAULT_GOLDEN_EXPECT", "DEFAULT_MAX_PPL"]
