"""Beam search for one Whisper window, as CTranslate2's `BeamSearch` runs it with
faster-whisper's settings (length penalty 1, patience 1).

Each step keeps the best `2 * beam` candidates over all beams (cumulative log
probabilities of the constrained distributions). Of the first `beam` candidates, one that
ends (<|endoftext|>, or the last allowed step) becomes a finished hypothesis and its slot
goes to the next candidate beyond the first `beam` that does not end. The search stops
once `beam` hypotheses are finished (or at the step limit); the winner has the best
total / length (the end token counts in the total, not in the length).
"""
from __future__ import annotations

from typing import List, Tuple

import numpy as np

from .rules import Rules, constrain


def _top(scores: np.ndarray, count: int) -> np.ndarray:
    """Indices of the `count` largest entries of a flat array, best first."""
    count = min(count, scores.size)
    part = np.argpartition(-scores, count - 1)[:count]
    return part[np.argsort(-scores[part], kind="stable")]


def beam_search(net, state, logits: np.ndarray, rules: Rules, beam: int,
                limit: int) -> Tuple[List[int], float]:
    """(best tokens, their summed log probability) from first-step `logits` [1, V]; `state`
    holds one row after the prompt and is reordered as beams survive."""
    candidates = 2 * beam
    vocab = logits.shape[-1]
    alive: List[List[int]] = [[]]                 # tokens of each live beam
    scores = np.zeros(1)                          # cumulative log prob of each live beam
    finished: List[Tuple[float, List[int], float]] = []   # (score/len, tokens, total)
    for step in range(limit):
        log_probs = constrain(logits, alive, step, rules)              # [beams, V]
        total = (log_probs + scores[:, None]).reshape(-1)               # [beams * V]
        top = _top(total, candidates)
        parents, tokens = top // vocab, top % vocab
        last_step = step == limit - 1
        keep = []                                 # indices into `top` of the next beams
        secondary = beam
        for k in range(min(beam, top.size)):
            chosen = k
            if tokens[k] == rules.eot or last_step:
                seq = alive[parents[k]] + ([] if tokens[k] == rules.eot else [int(tokens[k])])
                value = float(total[top[k]])
                finished.append((value / len(seq) if seq else -np.inf, seq, value))
                for j in range(secondary, top.size):
                    if tokens[j] != rules.eot:
                        chosen, secondary = j, j + 1
                        break
            keep.append(chosen)
        if last_step or len(finished) >= beam:
            break
        rows = parents[keep]
        alive = [alive[p] + [int(t)] for p, t in zip(rows, tokens[keep])]
        scores = total[top[keep]]
        state.reorder(rows)
        feed = tokens[keep].astype(np.int64)[:, None]                  # [beams, 1]
        logits = net.logits(net.decode(state, feed)[:, -1]).astype(np.float32)
    best = max(finished, key=lambda item: item[0])
    return best[1], best[2]


__all__ = ["beam_search"]
