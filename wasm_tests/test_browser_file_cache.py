"""A single-file model URL (no manifest, so no sha256 to key it by) is cached in IndexedDB
under its URL, size and HTTP validator: the first full load downloads it once, a later page
reads it from the cache with 0 bytes over the network, and a new version on the server
(another ETag) is downloaded again (issue 7)."""
import os
import shutil

import pytest

pytestmark = pytest.mark.native

QUERY = "pyodide=314&numpy=0&chunkSize={}".format(64 << 10)


def _describe(session, url):
    return session.call("(url) => apr.describe(url, {digests: true})", url)


def _cached(session, url):
    return [r for r in session.call("apr.cacheList()") if r["model"].endswith(url)]


def test_single_file_model_is_cached_by_url_and_validator(open_page, site, models_dir):
    src = os.path.join(models_dir, "layers-single.apr")
    path = os.path.join(models_dir, "single-cached.apr")
    shutil.copyfile(src, path)
    url, size = "models/single-cached.apr", os.path.getsize(path)
    session = open_page(QUERY)

    site.reset_counts()
    first = _describe(session, url)            # a small file is read whole: it is cached
    assert site.bytes_sent("/" + url) == size
    records = _cached(session, url)
    assert len(records) == 1 and records[0]["complete"] and records[0]["size"] == size

    session.open()                             # a fresh worker, the same IndexedDB
    site.reset_counts()
    assert _describe(session, url) == first
    assert site.bytes_sent("/" + url) == 0     # HEAD only: every byte came from the cache

    stat = os.stat(path)                       # a new version on the server: new ETag
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10 ** 9))
    session.open()
    site.reset_counts()
    assert _describe(session, url) == first
    assert site.bytes_sent("/" + url) == size
    assert len(_cached(session, url)) == 2     # the old version stays until evicted


def test_describing_a_large_file_reads_ranges_and_caches_nothing(open_page, site, models_dir):
    url = "models/smollm2.gguf"                # over the whole-read limit: ranges only
    size = os.path.getsize(os.path.join(models_dir, "smollm2.gguf"))
    session = open_page(QUERY)
    site.reset_counts()
    info = session.call("(url) => apr.describe(url)", url)
    assert info["format"] == "gguf" and len(info["tensors"]) == 272
    assert 0 < site.bytes_sent("/" + url) < size // 10
    assert not _cached(session, url)
