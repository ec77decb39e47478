"""apr_core: model file formats, quantization and a transformer runtime in pure Python.

Runs unchanged in CPython 3.8+, Pyodide and WASI. The format layer imports only the
standard library; numpy is imported by the modules that compute.
"""
__version__ = "0.1.0"
