"""One 30-second window: prompt -> tokens, as CTranslate2's `Whisper.generate` does it
(the decoder faster-whisper drives, our oracle).

Per step the logits go through, in this order: the suppressed tokens (every step), the
blank suppression (`suppress_ids_begin`, first step only), and -- unless the prompt ends
with <|notimestamps|> -- the timestamp rules: <|notimestamps|> never; the first token is a
timestamp no later than `max_initial_timestamp`; timestamps come in pairs except right
before <|endoftext|>; they never decrease; and when the total probability of the
timestamp tokens beats every single text token, a timestamp must be sampled. Log
probabilities are taken after all of that (the scores are those of the constrained
distribution, as CTranslate2 reports them).

`generate` runs greedy (temperature 0), sampling (`best_of` independent samples, the best
by average log probability) or beam search (`beam.py`). The no-speech probability is the
softmax of the logits at <|startoftranscript|> for the <|nospeech|> token.
"""
from __future__ import annotations

from typing import List, NamedTuple, Optional

import numpy as np

from .beam import beam_search
from .rules import Rules, constrain, log_softmax

MAX_INITIAL_TIMESTAMP = 1.0          # seconds
TIME_PRECISION = 0.02                # seconds per timestamp token


class Generation(NamedTuple):
    """A decoded window: tokens (no <|endoftext|>), their summed log probability (the
    end token's included), the no-speech probability, and the temperature used."""

    tokens: List[int]
    sum_logprob: float
    no_speech_prob: float
    temperature: float

    @property
    def avg_logprob(self) -> float:
        """faster-whisper's average: the sum over tokens + the end token."""
        return self.sum_logprob / (len(self.tokens) + 1)


def max_steps(prompt_length: int, n_text_ctx: int) -> int:
    """CTranslate2's bound on generated tokens: half the context, and what is left."""
    return min(n_text_ctx // 2, n_text_ctx - (prompt_length - 1))


def no_speech_probability(logits_at_sot: np.ndarray, no_speech: Optional[int]) -> float:
    if no_speech is None:
        return 0.0
    return float(np.exp(log_softmax(logits_at_sot[None, :])[0, no_speech]))


def start(model, audio_features: np.ndarray, prompt: List[int], sot_index: int, rows: int):
    """Forward the prompt: (decoder state with `rows` copies, first-step logits [rows, V],
    no-speech probability)."""
    net = model.net
    state = net.start(audio_features)
    hidden = net.decode(state, np.asarray([prompt], dtype=np.int64))    # [1, P, d]
    picked = net.logits(hidden[0, [sot_index, len(prompt) - 1]])        # [2, V]
    no_speech = no_speech_probability(picked[0], model.no_speech)
    if rows > 1:
        state.reorder(np.zeros(rows, dtype=np.int64))
    return state, np.repeat(picked[1:2], rows, axis=0).astype(np.float32), no_speech


def generate(model, audio_features: np.ndarray, prompt: List[int], rules: Rules,
             temperature: float = 0.0, beam_size: int = 1, best_of: int = 5,
             rng: Optional[np.random.RandomState] = None) -> Generation:
    """Decode one window (see the module docstring)."""
    sot_index = prompt.index(model.sot)
    limit = max_steps(len(prompt), model.config.n_text_ctx)
    if temperature == 0 and beam_size > 1:
        state, logits, no_speech = start(model, audio_features, prompt, sot_index, 1)
        tokens, total = beam_search(model.net, state, logits, rules, beam_size, limit)
        return Generation(tokens, total, no_speech, temperature)
    rows = 1 if temperature == 0 else best_of
    state, logits, no_speech = start(model, audio_features, prompt, sot_index, rows)
    rng = rng or np.random.RandomState(0)
    sequences: List[List[int]] = [[] for _ in range(rows)]     # tokens kept (no eot)
    history: List[List[int]] = [[] for _ in range(rows)]       # every token fed back
    totals = np.zeros(rows)
    done = np.zeros(rows, dtype=bool)
    for step in range(limit):
        log_probs = constrain(logits, history, step, rules)            # [rows, V]
        if temperature == 0:
            chosen = log_probs.argmax(axis=-1)
        else:
            chosen = np.array([rules.eot if done[r] else _sample(log_probs[r], temperature, rng)
                               for r in range(rows)])
        for row in range(rows):
            token = int(chosen[row])
            history[row].append(token)
            if done[row]:
                continue
            totals[row] += log_probs[row, token]
            if token == rules.eot:
                done[row] = True
            else:
                sequences[row].append(token)
        if done.all() or step == limit - 1:
            break
        feed = np.array([[seq[-1]] for seq in history], dtype=np.int64)   # [rows, 1]
        logits = model.net.logits(model.net.decode(state, feed)[:, -1]).astype(np.float32)
    best = max(range(rows), key=lambda r: _finalized(totals[r], len(sequences[r])))
    return Generation(sequences[best], float(totals[best]), no_speech, temperature)


def _finalized(total: float, length: int) -> float:
    """CTranslate2's hypothesis score with length penalty 1: total / length."""
    return total / length if length else -np.inf


def _sample(log_probs: np.ndarray, temperature: float, rng: np.random.RandomState) -> int:
    """A token drawn from softmax(log_probs / temperature)."""
    scaled = log_probs / temperature
    probs = np.exp(scaled - scaled.max())
    probs /= probs.sum()
    return int(rng.choice(probs.size, p=probs))


__all__ = ["Rules", "Generation", "constrain", "generate", "max_steps", "TIME_PRECISION",
           "MAX_INITIAL_TIMESTAMP"]
