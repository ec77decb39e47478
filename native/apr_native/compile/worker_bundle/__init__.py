"""The files of a worker bundle (`apr compile --target worker`), copied into it as they are,
and the build-time step that turns the npm Pyodide into workerd modules.

    worker.mjs        -> worker.mjs                the JavaScript module worker (entry point)
    boot.mjs          -> boot.mjs                  boots Pyodide from embedded modules
    js_entry.py       -> apr_worker/js_entry.py    (in python.zip) one call per request
    api.py            -> apr_worker/api.py         routes, request fields, OpenAI-shaped answers
    store.py          -> apr_worker/store.py       the model from the R2-style `MODEL` binding
    placement.py      -> apr_worker/placement.py   ... streamed into the SIMD kernels' memory
    make_config.py    -> workerd/make_config.py    writes workerd/config.capnp from the bundle
    r2_disk.mjs       -> workerd/r2_disk.mjs       local R2-style binding over a disk service
    pyodide_assets.py    (build time only) pyodide/ and pyodide_modules.mjs

The Python files run in Pyodide 0.17 (Python 3.8 syntax) with apr_core and numpy beside
them, never in this process; apr_native only copies them (`apr_native.compile.worker`).
"""
