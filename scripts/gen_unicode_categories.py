#!/usr/bin/env python3
"""Regenerate apr_core/data/unicode_categories.json: the code point runs of every
two-letter Unicode general category (`apr_core.text.pretokenize.scan_category_ranges`)
under this Python's `unicodedata` version, so that loading a BPE tokenizer does not scan
266k code points (~0.2 s) on a Python of the same Unicode version.

    python scripts/gen_unicode_categories.py           # write the JSON
    python scripts/gen_unicode_categories.py --check   # exit 1 if it differs from a scan
"""
from __future__ import annotations

import json
import os
import sys
import unicodedata

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from apr_core.text import pretokenize  # noqa: E402

JSON_PATH = os.path.join(ROOT, "apr_core", pretokenize.CATEGORY_TABLE)


def render() -> str:
    runs = pretokenize.scan_category_ranges()
    return json.dumps({"unidata_version": unicodedata.unidata_version,
                       "scan": [[b.start, b.stop] for b in pretokenize._SCAN],
                       "runs": {cat: [n for run in runs[cat] for n in run]
                                for cat in sorted(runs)}},
                      separators=(",", ":")) + "\n"


def main() -> int:
    text = render()
    if "--check" in sys.argv[1:]:
        with open(JSON_PATH, encoding="utf-8") as handle:
            return 0 if handle.read() == text else 1
    tmp = JSON_PATH + ".tmp"
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.replace(tmp, JSON_PATH)
    print("wrote {} ({} bytes, Unicode {})".format(JSON_PATH, len(text),
                                                  unicodedata.unidata_version))
    return 0


if __name__ == "__main__":
    sys.exit(main())
