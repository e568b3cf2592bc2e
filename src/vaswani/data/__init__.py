"""What is read: the data configs of every task (:mod:`~vaswani.data.config`, a run config's ``data``
section), readers of the user's files (:mod:`~vaswani.data.readers`, :mod:`~vaswani.data.labeled`,
:mod:`~vaswani.data.text`, :mod:`~vaswani.data.conll`) and of Hugging Face datasets into the same
structures (:mod:`~vaswani.data.hf_datasets`), pretrained word vectors
(:mod:`~vaswani.data.vectors`) and the word-level tokenizers they fill (:mod:`~vaswani.data.words`),
images (:mod:`~vaswani.data.images`: Pillow, ``ViTImageProcessor``'s preprocessing, the ImageFolder
layout; :mod:`~vaswani.data.image_sets`: the digits, held-out splits, augmented batches), batching
by tokens and lengths (:mod:`~vaswani.data.batching`), splits, and the embedded grammar corpus
(:mod:`~vaswani.data.grammar`).
"""
