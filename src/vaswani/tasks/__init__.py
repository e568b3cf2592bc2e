"""Training a task: one adapter module per task (its data, the trainer's ``Task``: batches, loss,
validation metrics; its recipe and configuration rules; what follows training; its ``evaluate``
hook), the registry that names them, and the life of a run.

- :mod:`~vaswani.tasks.registry`: one :class:`~vaswani.tasks.registry.TaskSpec` per task, written
  with keyword arguments; everything that dispatches on a task asks it;
- :mod:`~vaswani.tasks.lifecycle`: a new run's directory made and held, a stopped run resumed, a
  spent budget refused, a failed new run removed;
- :mod:`~vaswani.tasks.settings`: a run config from recipe < preset < config file < flags;
- :mod:`~vaswani.tasks.evaluation`: what ``vaswani evaluate`` hands a hook and what it returns;
- adapters: ``translation`` (with ``mrt``: minimum risk training), ``nat``, ``lm``, ``mlm`` (with
  next-sentence prediction), ``classify`` (with ``gpt_classify``), ``tag``, ``image``; shared by the
  BERT fine-tuning tasks, ``finetune`` (``--init``, epochs) and ``word_vectors``.

Using a trained run is :mod:`vaswani.pipelines`' (below); looking inside one is
:mod:`vaswani.inspect`'s (above).
"""
