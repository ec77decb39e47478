"""The one exception a crypto provider raises: authentication failed (wrong key, altered
bytes). Its own module so providers (`native`, the browser's WebCrypto one) need not import
the dispatcher that imports them; `apr_core.crypto` turns it into AprError(E005)."""


class DecryptionError(Exception):
    """Raised by providers when authentication fails; turned into AprError(E005)."""
