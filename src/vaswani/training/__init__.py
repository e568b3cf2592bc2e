"""One trainer for every task.

- :mod:`~vaswani.training.trainer`: the loop (accumulation, clipping, schedule, autocast, logging,
  evaluation, checkpoints, exact resume); ``fit_run`` for every task (with ``--lora R``, the model's
  adapters: the merged weights saved, the adapters beside them);
- :mod:`~vaswani.training.distributed`: this process's place and device, the process group, the
  collectives, DDP or FSDP2, whole optimizer states; :mod:`~vaswani.training.batches`: a process's
  rows of a batch and their move to the device;
- :mod:`~vaswani.training.precision` (autocast, the fp16 scaler, TF32),
  :mod:`~vaswani.training.compilation` (``torch.compile`` with its one-line fallback),
  :mod:`~vaswani.training.optimizer`, :mod:`~vaswani.training.schedules`,
  :mod:`~vaswani.training.losses`;
- :mod:`~vaswani.training.checkpoint` (atomic checkpoints, RNG states), :mod:`~vaswani.training.state`
  (``TrainerState``), :mod:`~vaswani.training.signals` (SIGINT/SIGTERM, a checkpoint's write never
  cut), :mod:`~vaswani.training.memory` (the model against memory; out-of-memory as one line),
  :mod:`~vaswani.training.progress`, :mod:`~vaswani.training.averaging` (checkpoint averaging),
  :mod:`~vaswani.training.selection` (the best weights by a validation metric).
"""
