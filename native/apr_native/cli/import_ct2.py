"""`apr import DIR` for a Whisper model directory -- CTranslate2 (`model.bin`) or Hugging
Face (`config.json` with `model_type: whisper` + SafeTensors): the part of `apr import`
that does not go through the SafeTensors/GGUF name maps.

The directory becomes one APR v2 file (weights in their stored dtype, mel filters,
tokenizer, generation settings; see `apr_core.conversion.whisper_ct2` and
`whisper_hf`), written by the same `convert()` as every import, so `--compress` and
`--quantize` work here too.
"""
from __future__ import annotations

import argparse
import os
import time
from typing import Any, Callable, Dict, Optional


def import_ctranslate2(args: argparse.Namespace, source: str, output: str,
                       digest: Optional[str], to_cache: bool,
                       report: Callable[[argparse.Namespace, Dict[str, Any]], int]) -> int:
    from apr_core.conversion.whisper_ct2 import whisper_view
    return import_whisper(args, source, output, digest, to_cache, report, whisper_view,
                          "ctranslate2")


def import_hf_whisper(args: argparse.Namespace, source: str, output: str,
                      digest: Optional[str], to_cache: bool,
                      report: Callable[[argparse.Namespace, Dict[str, Any]], int]) -> int:
    from apr_core.conversion.whisper_hf import hf_whisper_view
    return import_whisper(args, source, output, digest, to_cache, report, hf_whisper_view,
                          "hf")


def import_whisper(args: argparse.Namespace, source: str, output: str,
                   digest: Optional[str], to_cache: bool,
                   report: Callable[[argparse.Namespace, Dict[str, Any]], int],
                   open_view: Callable[[str], Any], name_source: str) -> int:
    """Write the view `open_view(source)` makes (a (view, open file) pair) to `output`."""
    from apr_core.conversion.convert import convert
    from apr_core.conversion.quality import QualityReport
    from .quantize_cmd import progress_bar
    start = time.perf_counter()
    view, handle = open_view(source)
    try:
        view.metadata["provenance"] = {
            "source": os.path.basename(os.path.normpath(source)),
            "source_format": view.metadata.get("source_format", name_source),
            "sha256": digest,
            "imported_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        if to_cache:
            os.makedirs(os.path.dirname(output), exist_ok=True)
        quality = QualityReport()
        with progress_bar("importing") as progress:
            convert(view, output, "apr", quantize=args.quantize, compression=args.compress,
                    overwrite=True, force=args.force, report=quality, progress=progress)
    finally:
        handle.close()
    warnings = list(dict.fromkeys(quality.warnings))
    return report(args, {"input": source, "output": output, "cached": False,
                         "architecture": "whisper", "names": "apr",
                         "name_source": name_source, "tensors": len(view.tensors),
                         "sha256": digest, "warnings": warnings,
                         "seconds": round(time.perf_counter() - start, 3)})
