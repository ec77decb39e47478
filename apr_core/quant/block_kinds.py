"""Kind codes of the block kernels shared by the browser shell and the native build
(web/src/kernels/block_codes.h's enum): GGUF block types read in place, as stored."""
from __future__ import annotations

from typing import Dict

# dtype name -> kind code; 0 is the browser's float32 kernel.
BLOCK_KINDS: Dict[str, int] = {"Q4_1": 1, "Q8_0": 2, "Q5_0": 3, "Q5_1": 4, "Q2_K": 5, "Q3_K": 6,
                               "Q4_K": 7, "Q5_K": 8, "Q6_K": 9, "Q4_0": 10}
KIND_F32 = 0
KIND_Q2_K = BLOCK_KINDS["Q2_K"]     # its mins meet sums of x over 16 columns (`sums16`)
