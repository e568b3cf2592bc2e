"""Using a trained run: one module per run kind, holding its file format (file names, the model its
config builds, vocabulary and tokenizer checks) and its wrapper, which ``load(run_dir, device)``
makes from a run directory. Every wrapper satisfies :class:`~vaswani.pipelines.common.Pipeline`,
the protocol the command line and the server type against.

- :mod:`~vaswani.pipelines.common`: the protocol, the model's device, ``--quantize``/``--dtype``'s
  run kinds;
- :mod:`~vaswani.pipelines.translation`: :class:`Translator` (greedy, beam, sampling, n-best,
  compiled decoding), ``translation_model`` (Transformer or RNN), the two tokenizers' files;
- :mod:`~vaswani.pipelines.nat`: :class:`NatTranslator` (Mask-Predict over a CMLM), the ``<mask>``
  token;
- :mod:`~vaswani.pipelines.lm`: :class:`LanguageModel` (generation, speculative decoding, loss), with
  :mod:`~vaswani.pipelines.lm_text` (documents, token stream, windows, next-token loss);
- :mod:`~vaswani.pipelines.bert`: a BERT run's files and tokenizer, and how texts become rows;
- :mod:`~vaswani.pipelines.mlm`: :class:`MaskedLanguageModel` (fill-mask, masked-token scores),
  BERT's corruption recipe, with :mod:`~vaswani.pipelines.nsp` (sentence pairs and their scores);
- :mod:`~vaswani.pipelines.encoder`: :class:`SentenceEncoder` (sentence vectors of any BERT run);
- :mod:`~vaswani.pipelines.classify`: :class:`TextClassifier` (BERT's or GPT's), how each reads texts;
- :mod:`~vaswani.pipelines.tag`: :class:`Tagger` (a label per word, scores);
- :mod:`~vaswani.pipelines.image`: :class:`ImageClassifier` (a ViT, its preprocessing, scores).

The package sits above ``generation/`` and ``training/`` and below ``tasks/``: a task's training
returns the wrapper of its run kind, and nothing here trains.
"""
