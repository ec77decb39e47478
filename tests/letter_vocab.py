"""The scheduler's view of a tokenizer for tests on synthetic models: no end-of-generation
ids, and one letter of text per token id."""


class LetterVocab:
    eog_ids = frozenset()

    def token_bytes(self, token_id, skip_special=False):
        return bytes([97 + token_id % 26])

    def piece(self, token_id, skip_special, after_special):
        return self.token_bytes(token_id), False
