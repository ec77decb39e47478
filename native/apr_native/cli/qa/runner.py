"""One `apr qa` run: every check of `CHECKS`, reported in that order.

They run in another order: the engine checks first (load, tokenizer, golden, perplexity,
throughput), then the memory check reads the peak RSS they reached, and only then the
format check (which dequantizes every tensor, far beyond what running the model needs)
and llama.cpp (a second copy of the weights) run, so neither inflates that peak.

A check that raises an `AprError` fails with the error as its detail; the checks that need
the engine are skipped, with the reason, when it did not load.
"""
from __future__ import annotations

import traceback
from typing import Callable, Dict, List, Optional

from apr_core.errors import AprError

from . import CHECKS, FAIL, SKIP, Check, QaOptions
from .file_checks import container, file_checks
from .llama_logits import logits_check
from .model_checks import ModelRun

ENGINE_CHECKS = ("tokenizer", "golden", "perplexity", "throughput")


def run_checks(path: str, options: QaOptions,
               starting: Optional[Callable[[str], None]] = None) -> List[Check]:
    """Every check of `CHECKS` on the model file (or directory) at `path`; `starting(name)`
    is told which check (or group) runs next (the command's progress line)."""
    done: Dict[str, Check] = {}
    tell = starting or (lambda name: None)
    run = ModelRun(path, options)
    if "load" not in options.skip:
        tell("load")
        done["load"] = _guard("load", run.load)
    for name in ENGINE_CHECKS + ("memory",):
        if name in options.skip:
            continue
        reason = run.needs_engine()
        tell(name)
        done[name] = Check(name, SKIP, reason) if reason else _guard(name, getattr(run, name))
    tell("format, checksum, signature")
    for check in file_checks(path, options):
        done[check.name] = check
    if "logits" not in options.skip:
        tell("logits")
        done["logits"] = _guard("logits", lambda: _logits(run, path))
    return [done.get(name) or Check(name, SKIP, "skipped (--skip {})".format(name))
            for name in CHECKS]


def _logits(run: ModelRun, path: str) -> Check:
    reason = run.needs_engine()
    if reason:
        return Check("logits", SKIP, reason)
    fmt, _ = container(path)
    return logits_check(path, fmt, run.engine, run.golden_prompt_ids, run.golden_ids)


def _guard(name: str, check: Callable[[], Check]) -> Check:
    """Run one check; an error is that check's failure, not the end of the report."""
    try:
        return check()
    except AprError as err:
        return Check(name, FAIL, str(err))
    except Exception as err:   # a crash inside a check is a failed check, said plainly
        from apr_native.config import log_level
        if log_level() == "debug":
            traceback.print_exc()
        return Check(name, FAIL, "{}: {}".format(type(err).__name__, err))


def passed(checks: List[Check]) -> bool:
    return not any(check.status == FAIL for check in checks)


__all__ = ["run_checks", "passed", "ENGINE_CHECKS"]
