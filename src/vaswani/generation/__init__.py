"""Decoding, shared by every model that generates, over one :class:`DecodingConfig`.

- :mod:`~vaswani.generation.config`: :class:`DecodingConfig` (every option, validated) and the
  length penalty;
- :mod:`~vaswani.generation.sampling`: greedy search and sampling over a next-token function;
- :mod:`~vaswani.generation.beam`: beam search over a next-token function with reorderable state;
- :mod:`~vaswani.generation.seq2seq`: the encoder-decoder's drivers (``translate_ids``,
  ``translate_beam_ids``);
- :mod:`~vaswani.generation.lm`: the decoder-only model's next-token function and budget, stop strings;
- :mod:`~vaswani.generation.continuous`: continuous batching of a decoder-only model (a server's
  engine: requests join and leave a running batch at step boundaries).

A new decoding strategy is a search module beside ``sampling`` and ``beam``, its name in
``config.STRATEGIES`` with the fields it reads, and a branch in each driver that offers it.
"""
