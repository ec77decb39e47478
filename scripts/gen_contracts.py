#!/usr/bin/env python3
"""Regenerate apr_core/data/contracts.json from contracts/*.yaml (the source of truth).

apr_core must not need PyYAML (Pyodide has none offline), so it reads this JSON copy;
tests/model/test_contracts.py fails when the copy and the YAML differ.

    python scripts/gen_contracts.py           # write the JSON
    python scripts/gen_contracts.py --check   # exit 1 if the JSON is stale
"""
from __future__ import annotations

import glob
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
YAML_DIR = os.path.join(ROOT, "contracts")
JSON_PATH = os.path.join(ROOT, "apr_core", "data", "contracts.json")


def load_yaml_contracts(yaml_dir: str = YAML_DIR) -> dict:
    """{family: contract} from every `*.yaml` in `yaml_dir` (needs PyYAML)."""
    import yaml
    families = {}
    for path in sorted(glob.glob(os.path.join(yaml_dir, "*.yaml"))):
        with open(path, encoding="utf-8") as handle:
            contract = yaml.safe_load(handle)
        name = contract["family"]
        if name in families:
            raise SystemExit("duplicate family {!r} in {}".format(name, path))
        families[name] = contract
    return families


def render(families: dict) -> str:
    """The JSON text written to apr_core/data/contracts.json (stable key order)."""
    payload = {"generated_from": "contracts/*.yaml by scripts/gen_contracts.py",
               "families": families}
    return json.dumps(payload, indent=1, sort_keys=True) + "\n"


def main(argv: list) -> int:
    text = render(load_yaml_contracts())
    if "--check" in argv:
        try:
            with open(JSON_PATH, encoding="utf-8") as handle:
                current = handle.read()
        except OSError:
            current = ""
        if current != text:
            print("apr_core/data/contracts.json is stale: run scripts/gen_contracts.py")
            return 1
        return 0
    with open(JSON_PATH, "w", encoding="utf-8") as handle:
        handle.write(text)
    print("wrote", os.path.relpath(JSON_PATH, ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
