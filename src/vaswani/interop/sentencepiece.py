"""OPUS-MT's own tokenizer files (``source.spm``, ``target.spm``, ``vocab.json``) as Hugging Face
``tokenizers`` objects that tokenize as ``transformers``' ``MarianTokenizer`` does.

``MarianTokenizer`` cuts a text into pieces with a SentencePiece unigram model and looks each
piece up in ``vocab.json`` (Marian's vocabulary, usually the union of both sides' pieces): a
piece it lacks is ``<unk>``. Decoding joins the pieces, reads "▁" as a space and strips the ends.

The equivalent :class:`~tokenizers.Tokenizer` has a :class:`~tokenizers.models.Unigram` model
whose vocabulary is ``vocab.json``'s pieces in id order, so that its ids are Marian's. A piece
of the SentencePiece model keeps its score, so the best segmentation is SentencePiece's. A
single character that only the other side knows is scored as SentencePiece scores an unknown
character (the lowest piece score minus 10): it is cut where SentencePiece cuts its unknown
character, whose text ``vocab.json`` then finds. Every other piece (the other side's longer
pieces, ``</s>``, ``<unk>``, ``<pad>``) is scored so low that it is never chosen. The normaliser
is the model's own character map (``precompiled_charsmap``, NFKC for OPUS-MT) followed by its
whitespace rules (ends stripped, runs of spaces made one, a space put in front).

One difference remains: SentencePiece fuses a run of unknown characters into one piece, and
Marian looks the run up as a whole (``<unk>`` in practice), whereas a character of the run that
only the other side knows keeps its own id here. Only unigram models without byte fallback or
user-defined pieces are read (OPUS-MT's are such); others are refused.

Reading ``.spm`` files needs the optional ``sentencepiece`` and ``protobuf`` packages
(``pip install "vaswani[marian]"``); the rest of vaswani does not. An imported run keeps the
files (:func:`copy_opus_files`), so that its export gives ``MarianTokenizer`` the same ones.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, processors

from vaswani.errors import DataError
from vaswani.io import first_line, read_bytes_bounded, read_json, write_file
from vaswani.tokenizer import MARIAN_EOS, MARIAN_SPECIALS, UNK

SOURCE_SPM, TARGET_SPM = "source.spm", "target.spm"  # OPUS-MT's SentencePiece models
VOCAB, TARGET_VOCAB = "vocab.json", "target_vocab.json"  # and its vocabularies (piece → id)
SPACE = "▁"
UNK_PENALTY = 10.0  # SentencePiece's unknown character scores the lowest piece score minus this
NEVER = -1e9  # the score of a piece SentencePiece could not produce: below any whole segmentation
ENDS = Regex("^ +| +$")  # the spaces at either end of a text
# SentencePiece's ModelProto enums (sentencepiece_model.proto).
UNIGRAM = 1
NORMAL, USER_DEFINED, BYTE = 1, 4, 6


def opus_files(folder: Path) -> dict[str, Path]:
    """OPUS-MT's tokenizer files in ``folder``, under the names ``MarianTokenizer`` reads:
    ``source.spm``, ``target.spm`` (``source.spm`` when the folder has no other), ``vocab.json``,
    and ``target_vocab.json`` when the folder has a separate target vocabulary. Empty when
    ``folder`` lacks ``source.spm`` or ``vocab.json``."""
    if not ((folder / SOURCE_SPM).is_file() and (folder / VOCAB).is_file()):
        return {}
    target_spm = TARGET_SPM if (folder / TARGET_SPM).is_file() else SOURCE_SPM
    files = {SOURCE_SPM: folder / SOURCE_SPM, TARGET_SPM: folder / target_spm, VOCAB: folder / VOCAB}
    if (folder / TARGET_VOCAB).is_file():
        files[TARGET_VOCAB] = folder / TARGET_VOCAB
    return files


def copy_opus_files(src: Path, out: Path) -> bool:
    """Copy :func:`opus_files` of the folder ``src`` into the folder ``out`` (made if needed);
    False, with nothing written, when ``src`` has none."""
    files = opus_files(src)
    if files:
        out.mkdir(exist_ok=True)
    for name, path in files.items():
        write_file(out / name, read_bytes_bounded(path))
    return bool(files)


def read_model(path: Path) -> Any:
    """The ``ModelProto`` of the SentencePiece model file ``path``."""
    try:
        from sentencepiece import sentencepiece_model_pb2
    except ImportError:
        raise DataError(
            f"{path}: reading SentencePiece files needs the sentencepiece and protobuf packages: "
            "pip install sentencepiece protobuf"
        ) from None
    model = sentencepiece_model_pb2.ModelProto()
    data = read_bytes_bounded(path, "a SentencePiece model")
    try:
        model.ParseFromString(data)
    except Exception as exc:  # protobuf's DecodeError on a foreign file
        raise DataError(f"{path}: not a SentencePiece model ({first_line(exc)})") from None
    if not model.pieces:
        raise DataError(f"{path}: not a SentencePiece model (no pieces)")
    if model.trainer_spec.model_type != UNIGRAM:
        raise DataError(f"{path}: only SentencePiece unigram models are supported")
    odd = [p.piece for p in model.pieces if p.type in (USER_DEFINED, BYTE)]
    if odd:
        raise DataError(
            f"{path}: user-defined and byte pieces are not supported, found {odd[0]!r} ({len(odd)} in all)"
        )
    return model


def read_vocab(path: Path) -> list[str]:
    """The pieces of Marian's ``vocab.json`` (piece → id, the ids 0 … n-1) in id order."""
    vocab = read_json(path)
    if not isinstance(vocab, dict) or not all(
        isinstance(i, int) and not isinstance(i, bool) for i in vocab.values()
    ):
        raise DataError(f"{path}: expected a JSON object of pieces to integer ids")
    if sorted(vocab.values()) != list(range(len(vocab))):
        raise DataError(f"{path}: the ids must be 0 … {len(vocab) - 1}, each once")
    for token in MARIAN_SPECIALS:
        if token not in vocab:
            raise DataError(f"{path}: no {token} piece")
    return sorted(vocab, key=vocab.__getitem__)


def _normalizer(model: Any) -> normalizers.Normalizer:
    """SentencePiece's normalisation of ``model``, spaces written as "▁"."""
    spec = model.normalizer_spec
    steps: list[normalizers.Normalizer] = []
    if spec.precompiled_charsmap:
        steps.append(normalizers.Precompiled(spec.precompiled_charsmap))
    if spec.remove_extra_whitespaces:
        steps += [normalizers.Replace(ENDS, ""), normalizers.Replace(Regex(" {2,}"), " ")]
    steps.append(normalizers.Replace(" ", SPACE))
    if spec.add_dummy_prefix:
        steps.append(normalizers.Prepend(SPACE))
    return normalizers.Sequence(steps)


def marian_tokenizer(spm_path: Path, vocab_path: Path, source: bool) -> Tokenizer:
    """The tokenizer of one side of an OPUS-MT folder: the SentencePiece model ``spm_path`` with
    the ids of ``vocab_path``, appending ``</s>`` to each text when it is the ``source`` side,
    as ``MarianTokenizer`` does (see the module docstring)."""
    model = read_model(spm_path)
    pieces = read_vocab(vocab_path)
    scores = {p.piece: p.score for p in model.pieces if p.type == NORMAL}
    missing = sorted(set(scores) - set(pieces))
    if missing:
        raise DataError(
            f"{spm_path}: piece {missing[0]!r} is not in {vocab_path.name} ({len(missing)} in all); "
            "its tokens would have no id"
        )
    unknown_char = min(scores.values()) - UNK_PENALTY
    vocab = [(piece, scores.get(piece, unknown_char if len(piece) == 1 else NEVER)) for piece in pieces]
    ids = {piece: i for i, piece in enumerate(pieces)}
    tokenizer = Tokenizer(models.Unigram(vocab, unk_id=ids[UNK], byte_fallback=False))
    tokenizer.normalizer = _normalizer(model)
    tokenizer.decoder = decoders.Sequence(
        [decoders.Replace(SPACE, " "), decoders.Fuse(), decoders.Replace(ENDS, "")]
    )
    tokenizer.add_special_tokens(list(MARIAN_SPECIALS))
    if source:
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"$A {MARIAN_EOS}", special_tokens=[(MARIAN_EOS, ids[MARIAN_EOS])]
        )
    return tokenizer
