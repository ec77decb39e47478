"""The packaged Unicode category table (apr_core/data/unicode_categories.json) that spares
BPE tokenizers a 266k-code-point scan at load: equal to a fresh scan wherever this
Python's Unicode version is the table's, unused (a scan instead) wherever it is not."""
import json
import os
import pkgutil
import subprocess
import sys
import unicodedata

from apr_core.text import pretokenize

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_table_is_a_scan_of_its_unicode_version():
    packed = json.loads(pkgutil.get_data("apr_core", pretokenize.CATEGORY_TABLE))
    table = pretokenize.packaged_category_ranges()
    if packed["unidata_version"] == unicodedata.unidata_version:
        assert table == pretokenize.scan_category_ranges()
        assert subprocess.run([sys.executable, os.path.join(
            ROOT, "scripts", "gen_unicode_categories.py"), "--check"]).returncode == 0
    else:                                  # another Python: its own scan, never the table
        assert table is None


def test_another_unicode_version_scans(monkeypatch):
    monkeypatch.setattr(pretokenize.unicodedata, "unidata_version", "0.0.0")
    assert pretokenize.packaged_category_ranges() is None
