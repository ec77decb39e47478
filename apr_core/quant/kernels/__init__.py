"""numpy kernels; importing this package registers every one of them in the registry."""
from . import floats  # noqa: F401
from . import legacy  # noqa: F401
from . import kquants  # noqa: F401
from . import iquants  # noqa: F401
from . import iquants_grid  # noqa: F401
from . import quantize_floats  # noqa: F401
from . import quantize_legacy  # noqa: F401
from . import quantize_kquants  # noqa: F401
