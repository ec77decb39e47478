"""Sharded APR models in Chromium + Pyodide 314: parity with native, the IndexedDB cache,
corrupt shards and dropped connections (issue 7, tests 1-3)."""
import hashlib
import json
import os

import pytest

from apr_core.formats import flags as F
from apr_core.formats.shards import read_sharded

pytestmark = pytest.mark.native

CHUNK = 64 << 10  # IndexedDB chunk size the page is told to use (so shards span many chunks)
QUERY = "pyodide=314&numpy=0&chunkSize={}".format(CHUNK)


def native_view(path):
    """What the browser must reproduce: metadata, index and every tensor's sha256."""
    with read_sharded(path) as model:
        index = [{"name": t.name, "dtype": t.dtype.name, "shape": list(t.shape), "stored": t.size,
                  "bytes": t.nbytes, "shard": t.shard} for t in model.tensors.values()]
        digests = {name: hashlib.sha256(model.read_raw(name).data).hexdigest()
                   for name in model.tensors}
        return json.loads(json.dumps(model.metadata)), index, digests, model.shard_files


def manifest_entries(path):
    with read_sharded(path) as model:
        return model.metadata["shards"]


def describe(session, path="models/layers.apr", **keys):
    """`apr.describe` with tensor digests; `keys`: trustedKey, password or secretKey."""
    return session.call("([url, keys]) => apr.describe(url, {digests: true, ...keys})",
                        [path, keys])


def test_sharded_lz4_model_loads_in_pyodide_314_like_native(open_page, models_dir):
    path = os.path.join(models_dir, "layers.apr")
    metadata, index, digests, shard_files = native_view(path)
    with read_sharded(path) as model:
        assert len(model.shards) >= 3
        assert all(shard.flags & F.COMPRESSED for shard in model.shards)
    session = open_page(QUERY)
    got = describe(session)
    assert got["format"] == "apr2-sharded"
    assert "SHARDED" in got["flags"]
    assert got["metadata"] == metadata
    assert got["tensors"] == index
    assert got["shards"] == shard_files
    assert got["tensor_sha256"] == digests
    cached = session.call("apr.cacheList()")
    assert sorted(s["sha256"] for s in cached if s["complete"]) == sorted(
        e["sha256"] for e in manifest_entries(path))


def test_second_load_reads_every_shard_from_indexeddb(open_page, site, models_dir):
    path = os.path.join(models_dir, "layers.apr")
    entries = manifest_entries(path)
    session = open_page(QUERY)
    site.reset_counts()
    first = describe(session)
    shard_bytes = sum(site.bytes_sent("/models/" + e["file"]) for e in entries)
    assert shard_bytes == sum(e["size"] for e in entries)

    session.open()  # same context, so the same IndexedDB; a fresh worker and Python
    site.reset_counts()
    session.call("window.shardEvents = []; apr.on('shard', (e) => shardEvents.push(e)); 0")
    second = describe(session)
    assert second == first
    # Not one shard byte crossed the network; only the manifest (which names the shards,
    # and so must be re-read to notice a new model version) was fetched.
    for entry in entries:
        assert site.bytes_sent("/models/" + entry["file"]) == 0, entry["file"]
    assert site.bytes_sent("/models/") == os.path.getsize(path)
    events = session.call("shardEvents")
    assert sorted(e["name"] for e in events) == sorted(e["file"] for e in entries)
    assert all(e["fromCache"] and e["downloaded"] == 0 for e in events)


def test_corrupt_shard_is_rejected_not_cached_and_reported(open_page, site, models_dir):
    path = os.path.join(models_dir, "layers.apr")
    entries = manifest_entries(path)
    bad = entries[1]
    flip_at = bad["size"] // 2

    def corrupt(url_path, offset, chunk):
        if offset <= flip_at < offset + len(chunk):
            i = flip_at - offset
            chunk = chunk[:i] + bytes([chunk[i] ^ 0x40]) + chunk[i + 1:]
        return chunk

    site.faults["/models/" + bad["file"]] = corrupt
    try:
        session = open_page(QUERY)
        session.page.fill("#model-url", "models/layers.apr")
        session.page.click("#load-button")
        session.page.wait_for_selector("#error:not(.hidden)", timeout=120_000)
        message = session.page.inner_text("#error")
        assert message == ("shard {} failed its sha256 check: the server sent corrupt data, "
                           "nothing was cached".format(bad["file"]))
        assert session.page.get_attribute("#error", "data-code") == "checksum"
        cached = {s["sha256"]: s for s in session.call("apr.cacheList()")}
        assert bad["sha256"] not in cached
        assert entries[0]["sha256"] in cached and cached[entries[0]["sha256"]]["complete"]
        # Nothing of the bad shard is left behind: only the good shard's chunks remain.
        assert session.call("apr.call('cacheChunks')") == -(-entries[0]["size"] // CHUNK)
    finally:
        site.faults.clear()
    # With the server fixed, the same page loads the model and matches native.
    assert describe(session)["tensor_sha256"] == native_view(path)[2]


def test_dropped_connection_resumes_from_stored_chunks(open_page, site, models_dir):
    path = os.path.join(models_dir, "layers.apr")
    entries = manifest_entries(path)
    victim = entries[2]
    url_path = "/models/" + victim["file"]
    cut = 5 * CHUNK + CHUNK // 2  # the connection drops in the middle of the sixth chunk
    dropped = []

    def drop_once(path_, offset, chunk):
        if not dropped and offset + len(chunk) > cut:
            dropped.append(offset)
            return chunk[:cut - offset]
        return chunk

    site.faults[url_path] = drop_once
    site.reset_counts()
    try:
        session = open_page(QUERY)
        got = describe(session)
    finally:
        site.faults.clear()
    assert dropped, "the fault never fired"
    assert got["tensor_sha256"] == native_view(path)[2]
    ranges = [(rng, status) for p, rng, status in site.requests if p == url_path]
    assert len(ranges) == 2, ranges
    assert ranges[0] == ("bytes=0-{}".format(victim["size"] - 1), 206)
    # The retry asks only for what was not stored: it starts at a chunk boundary after
    # some stored chunks (how many of the cut-off bytes the browser delivered before
    # reporting the error is up to the network stack), never at 0.
    resume = int(ranges[1][0].split("=")[1].split("-")[0])
    assert ranges[1] == ("bytes={}-{}".format(resume, victim["size"] - 1), 206)
    assert resume % CHUNK == 0 and CHUNK <= resume <= cut, (resume, ranges)
    assert site.bytes_sent(url_path) == cut + victim["size"] - resume


def model_bytes(models_dir, name):
    return sum(e["size"] for e in manifest_entries(os.path.join(models_dir, name)))


def test_cache_lists_evicts_least_recently_used_and_clears(open_page, site, models_dir):
    a, b = model_bytes(models_dir, "layers.apr"), model_bytes(models_dir, "layers-raw.apr")
    # Room for either model, not both: loading the second evicts the first.
    session = open_page(QUERY + "&maxBytes={}".format(max(a, b) + 1024))
    describe(session, "models/layers.apr")
    models = session.call("apr.cacheModels()")
    assert [(m["model"].rsplit("/", 1)[1], m["bytes"], m["complete"]) for m in models] == [
        ("layers.apr", a, True)]
    describe(session, "models/layers-raw.apr")
    models = session.call("apr.cacheModels()")
    assert [(m["model"].rsplit("/", 1)[1], m["bytes"]) for m in models] == [("layers-raw.apr", b)]
    site.reset_counts()
    session.call("apr.forget('models/layers.apr')")  # out of memory, and evicted from disk:
    describe(session, "models/layers.apr")           # so it crosses the network again
    assert site.bytes_sent("/models/layers-0") == a
    session.call("apr.cacheClear()")
    assert session.call("apr.cacheList()") == []
    assert session.call("apr.call('cacheChunks')") == 0


def test_a_model_larger_than_the_cache_budget_is_a_quota_error(open_page, models_dir):
    entries = manifest_entries(os.path.join(models_dir, "layers.apr"))
    budget = entries[0]["size"] + entries[1]["size"]  # two shards fit, the third does not
    session = open_page(QUERY + "&maxBytes={}".format(budget))
    session.page.fill("#model-url", "models/layers.apr")
    session.page.click("#load-button")
    session.page.wait_for_selector("#error:not(.hidden)", timeout=120_000)
    assert session.page.get_attribute("#error", "data-code") == "quota"
    assert session.page.inner_text("#error").startswith("not enough browser storage: ")
    # The model's own shards are never evicted to make room for its next shard.
    cached = sorted(s["name"] for s in session.call("apr.cacheList()"))
    assert cached == sorted(e["file"] for e in entries[:2])
