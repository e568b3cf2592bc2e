"""Looking inside a trained run: what ``vaswani attention`` and ``vaswani plot positions`` show, as
data that :mod:`vaswani.plots` draws.

- :mod:`~vaswani.inspect.attention`: the attention maps of one input for each run kind
  (:data:`~vaswani.inspect.attention.ATTENTION`: a translator's cross- and self-attention, a GPT's or
  a BERT's self-attention, a ViT's [CLS] rollout over its image), with readable token labels;
- :mod:`~vaswani.inspect.positions`: a run's position scheme as numbers (the dot products of
  position vectors by distance, or a rotary scheme's);
- :mod:`~vaswani.inspect.runs`: several runs side by side, the config fields in which they differ
  and their final metrics (``vaswani compare``).

It sits above :mod:`vaswani.pipelines` (it reads the wrappers) and :mod:`vaswani.tasks` (the
registry), beside :mod:`vaswani.interop`.
"""
