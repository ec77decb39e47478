"""The fixed texts of `apr qa`: a round-trip text for the tokenizer check and a short
English text for the perplexity check (written for apr, no third-party corpus).

The perplexity text is about 400 tokens with the usual 32k-150k vocabularies (SmolLM2 398,
Qwen2.5 392): three chunks of `PPL_CONTEXT` tokens, where `apr_core.runtime.perplexity`
needs two. Measured PPL with that context: SmolLM2-135M-Instruct 18.5,
Qwen2.5-Coder-0.5B-Instruct 30.3; SmolLM2 with its embedding rows shuffled: 249535.
"""
from __future__ import annotations

# Every kind of text a byte-level tokenizer must return byte for byte: ASCII prose, code
# with tabs and runs of spaces, CRLF, accents and combining marks, non-Latin scripts,
# emoji (with ZWJ sequences and flags), unusual spaces and digits.
ROUND_TRIP_TEXT = (
    "The quick brown fox jumps over the lazy dog. I've been told it's 42.\n"
    "def fib(n):\n\tif n < 2:\n\t\treturn n\n    return fib(n - 1) + fib(n - 2)  # O(2^n)\n"
    "for (int i = 0; i < 10; ++i) { printf(\"%d\\n\", i); }\r\n"
    "Ünïcödé: déjà vu, Straße, naïve café; x\u0301\u0327 combining marks\n"
    "日本語のテキスト, 中文文本, 한국어, Ελληνικά, русский, العربية, עברית, हिन्दी\n"
    "emoji 😀🎉 👩\u200d👩\u200d👧\u200d👦 🇫🇷 ✅\n"
    "\u00a0non-breaking\u2003em\u3000ideographic   trailing spaces   \n\n"
    "1234567890 3.14159 -42 1e10 2024-06-01 0x1F\n"
)

# The perplexity check's context (tokens per chunk; the second half of each is scored).
PPL_CONTEXT = 128

ENGLISH_TEXT = "\n\n".join([
(
    "The river begins as a thin stream in the hills, where rain and melting snow "
    "gather between the rocks. For the first few miles it moves quickly, cutting a "
    "narrow valley through the forest and turning the wheels of two old mills that "
    "once ground grain for the villages nearby. Farther down, the land becomes "
    "flatter and the river slows. It spreads out across wide meadows, and in spring "
    "it often floods the fields on both banks. Farmers have learned to plant late in "
    "those fields, after the water has gone back and the soil has had time to dry."),
(
    "The largest town on the river grew up at the point where an old road crossed it. "
    "At first there was only a ferry, then a wooden bridge, and finally a stone "
    "bridge with five arches that still stands today. Merchants stopped in the town "
    "to rest their horses and to trade, and the market held every Saturday in the "
    "main square became known throughout the region. Wool, cheese, salt and timber "
    "were the most common goods, but travelling sellers also brought spices, cloth "
    "and books from distant cities."),
(
    "In the nineteenth century the railway arrived, and the town changed quickly. "
    "Factories were built along the river, and the population doubled in less than "
    "thirty years. The water, which had been clear enough to drink, became dirty and "
    "dangerous. It took more than a century, and a long campaign by the people who "
    "lived there, before the factories were closed or moved and the river was clean "
    "again. Today children swim in it during the summer, and fish have returned to "
    "the deep pools below the bridge."),
(
    "Every year, on the first weekend of June, the town holds a festival to celebrate "
    "the river. Boats decorated with flowers float slowly under the bridge, musicians "
    "play in the square, and families walk along the banks until late in the evening. "
    "Visitors often say that the festival is the best time to see the town, because "
    "everyone seems to be outside and in a good mood."),
])
