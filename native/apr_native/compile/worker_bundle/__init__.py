"""The files of a worker bundle (`apr compile --target worker`), copied into it as they are.

    entry.py        -> src/worker.py             the Python Worker: `Default(WorkerEntrypoint)`
    api.py          -> src/apr_worker/api.py     routes, request fields, OpenAI-shaped answers
    store.py        -> src/apr_worker/store.py   the model from the R2-style `MODEL` binding
    make_config.py  -> workerd/make_config.py    writes workerd/config.capnp from the bundle
    r2_disk.mjs     -> workerd/r2_disk.mjs       local R2-style binding over a disk service
    probe.mjs       -> workerd/probe.mjs         JavaScript check of the bundle's bindings

They run in Pyodide (Cloudflare's, and Pyodide 0.17 in the tests: Python 3.8 syntax) with
apr_core and numpy beside them, never in this process; apr_native only copies them
(`apr_native.compile.worker`).
"""
