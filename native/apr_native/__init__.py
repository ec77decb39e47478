"""apr_native: the CPython-only half of apr (CLI, server, mmap, accelerated kernels)."""
__version__ = "0.1.0"
