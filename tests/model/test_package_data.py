"""`apr_core.package_data.read`: the files packaged in apr_core, as pkgutil.get_data reads
them (the contracts are read this way when a model's family is looked up)."""
import pkgutil

import pytest

from apr_core import package_data


@pytest.mark.parametrize("resource", ["data/contracts.json", "data/unicode_categories.json"])
def test_reads_what_pkgutil_reads(resource):
    assert package_data.read(resource) == pkgutil.get_data("apr_core", resource)


def test_a_missing_file_is_an_os_error():
    with pytest.raises(OSError):
        package_data.read("data/no-such-file.json")
