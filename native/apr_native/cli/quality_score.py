"""The 100-point quality assessment of `apr validate --quality` (seed 000 §4.4).

Four categories of 25 points; each check below is all-or-nothing except "ranges" (10
points, -5 per error finding and -1 per warning). Structure and Security score the
container (so an APR file, with its CRC32, scores higher than the same tensors in GGUF or
SafeTensors, which have no checksum); Weights and Metadata score the model, and are the
same whichever format holds it.
"""
from __future__ import annotations

from typing import Any, Dict, List, NamedTuple


class Check(NamedTuple):
    category: str
    key: str
    points: int
    description: str


# THE scoring table.
CHECKS = (
    Check("structure", "opens", 10, "file parses and every tensor decodes"),
    Check("structure", "clean", 5, "no reader warnings (flags, padding, trailing bytes)"),
    Check("structure", "aligned", 5, "every tensor payload on a 32-byte boundary or better"),
    Check("structure", "shapes", 5, "shapes match the family contract and the vocabulary"),
    Check("security", "checksum", 10, "whole-file checksum present and verified"),
    Check("security", "signature", 10, "Ed25519 signature present and verified"),
    Check("security", "no_code", 5, "container cannot execute code (no pickle)"),
    Check("weights", "finite", 10, "no NaN/Inf values"),
    Check("weights", "nonzero", 5, "no tensor that is entirely zero"),
    Check("weights", "ranges", 10, "statistics inside the seed 000 §10.9 ranges"),
    Check("metadata", "architecture", 5, "a model-family contract recognises the model"),
    Check("metadata", "vocab", 5, "vocabulary present"),
    Check("metadata", "name", 5, "model name present"),
    Check("metadata", "license", 5, "license present"),
    Check("metadata", "provenance", 5, "provenance (source or model card) present"),
)
CATEGORIES = ("structure", "security", "weights", "metadata")
GRADES = ((90, "EXCELLENT"), (75, "GOOD"), (50, "FAIR"), (0, "POOR"))


def score(facts: Dict[str, Any]) -> Dict[str, Any]:
    """Points per check and category from `facts` (booleans per check key, plus
    `range_errors` / `range_warnings` counts for "ranges")."""
    checks: List[Dict[str, Any]] = []
    for check in CHECKS:
        if check.key == "ranges":
            got = max(0, check.points - 5 * facts.get("range_errors", 0)
                      - facts.get("range_warnings", 0)) if facts.get("opens") else 0
        else:
            got = check.points if facts.get(check.key) else 0
        checks.append({"category": check.category, "check": check.key, "points": got,
                       "max": check.points, "description": check.description})
    categories = {c: sum(x["points"] for x in checks if x["category"] == c)
                  for c in CATEGORIES}
    total = sum(categories.values())
    grade = next(label for bound, label in GRADES if total >= bound)
    return {"total": total, "grade": grade, "categories": categories, "checks": checks}
