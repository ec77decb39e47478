"""numpy kernels; importing this package registers every one of them in the registry."""
from . import floats
from . import legacy
from . import kquants
from . import iquants
from . import iquants_grid
from . import quantize_floats
from . import quantize_legacy
from . import quantize_kquants

# the kernel modules, each registered on import
MODULES = (floats, legacy, kquants, iquants, iquants_grid, quantize_floats, quantize_legacy,
           quantize_kquants)
