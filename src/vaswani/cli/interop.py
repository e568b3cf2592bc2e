"""``vaswani import-hf`` and ``vaswani export-hf``: Hugging Face-format checkpoints in and out."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from vaswani.cli.common import add_run_command
from vaswani.cli.outputs import check_output, is_run
from vaswani.errors import ConfigError


def add_parsers(commands: Any) -> None:
    p = commands.add_parser(
        "import-hf",
        help="convert a Hugging Face model folder into a vaswani run directory",
        description="Read DIR (config.json, model.safetensors or pytorch_model.bin, and the tokenizer) and "
        "write the run directory OUT. Supported: GPT-2 (model_type gpt2; tokenizer.json or vocab.json + "
        "merges.txt), a language model for `vaswani generate` and `vaswani evaluate`; Llama "
        "(model_type llama, LlamaForCausalLM; tokenizer.json; rope_scaling null or default), a language "
        "model as well; Marian/OPUS-MT "
        "(model_type marian; tokenizer.json, and target_tokenizer.json for a separate target vocabulary, or "
        "else OPUS-MT's SentencePiece files source.spm, target.spm and vocab.json (target_vocab.json for "
        "a separate target vocabulary), read as MarianTokenizer reads them, which needs the sentencepiece "
        "and protobuf packages, and kept for export-hf), a translator for `vaswani translate`; BERT "
        "(model_type bert; tokenizer.json or vocab.txt), a masked language model for `vaswani fill-mask` "
        "and `vaswani evaluate` when the weights have the MLM head (BertForMaskedLM, BertForPreTraining), "
        "else an encoder for `vaswani embed` and `vaswani train classify --init` (BertModel). Pickled "
        "weights are read as plain tensor data only. OUT must be new or empty.",
    )
    p.add_argument("src", type=Path, metavar="DIR")
    p.add_argument("out", type=Path, metavar="OUT")
    p.set_defaults(handler=cmd_import)
    p = add_run_command(
        commands,
        "export-hf",
        help="write a vaswani run as a Hugging Face model folder",
        description="Write the run RUN_DIR as a Hugging Face model folder OUT (config.json, "
        "model.safetensors, tokenizer files) that transformers' from_pretrained loads. Supported: "
        "language models (lm), as GPT-2, or as Llama (LlamaForCausalLM) when their positions are rotary; "
        "translation runs, as Marian (MarianMTModel; a run imported from "
        "OPUS-MT's SentencePiece files gets them back, for MarianTokenizer); masked language models (mlm), "
        "as BERT (BertForMaskedLM); encoder runs (encoder), as BERT (BertModel). OUT must be new or empty. "
        "For CTranslate2, convert a translation run with export-ctranslate2 (CTranslate2's own converter "
        "reads a MarianMTModel with Marian's conventions, which a vaswani run does not follow).",
    )
    p.add_argument("out", type=Path, metavar="OUT")
    p.set_defaults(handler=cmd_export)
    p = add_run_command(
        commands,
        "export-peft",
        help="write a LoRA run's adapters in PEFT's format",
        description="Write the adapters of the LoRA run RUN_DIR (trained with --lora R) into the folder "
        "OUT in PEFT's format (adapter_config.json, adapter_model.safetensors), named as the "
        "Hugging Face export of its --init run names its modules (vaswani export-hf INIT_RUN): "
        "peft.PeftModel.from_pretrained(model, OUT) on that model computes what the run does. Language "
        "models (GPT-2, Llama) and BERT classifiers and taggers (their encoder; a new head trained in full "
        "is left out). The run's model.safetensors already holds the merged weights. OUT must be new or "
        "empty.",
    )
    p.add_argument("out", type=Path, metavar="OUT")
    p.set_defaults(handler=cmd_export_peft)
    p = add_run_command(
        commands,
        "export-ctranslate2",
        help="write a translation run as a CTranslate2 model folder",
        description="Write the translation run RUN_DIR as a CTranslate2 model folder OUT that "
        "ctranslate2.Translator loads, giving vaswani's translations id for id (CTranslate2's own "
        "converter reads an export-hf folder with Marian's conventions, which a vaswani run does not "
        "follow). Needs the ctranslate2 and transformers packages. OUT must be new or empty.",
    )
    p.add_argument("out", type=Path, metavar="OUT")
    p.add_argument(
        "--quantization",
        choices=["int8", "int8_float32", "int8_float16", "int16", "float16", "bfloat16"],
        help="CTranslate2's weight quantization (default: none, float32 weights)",
    )
    p.set_defaults(handler=cmd_export_ctranslate2)
    p = add_run_command(
        commands,
        "export-onnx",
        help="write a run as ONNX graphs",
        description="Write the run RUN_DIR as ONNX graphs in OUT, with dynamic batch and sequence axes, "
        "and onnx.json naming their inputs and outputs: a language model (lm) as model.onnx (input_ids → "
        "logits of every position; unpadded or right-padded rows) and model_with_past.onnx (one new token, "
        "attention_mask and past_key_values → its logits and present_key_values); a Transformer translator "
        "as encoder.onnx (input_ids → encoder_hidden_states), decoder.onnx (decoder_input_ids, "
        "encoder_hidden_states, input_ids → logits of every target position) and decoder_with_past.onnx "
        "(with past_key_values, as the language model's); a BERT classifier "
        "(classify) as model.onnx (input_ids, token_type_ids, attention_mask → logits); mlm and encoder runs "
        "as encoder.onnx (→ last_hidden_state). Needs the onnx package. OUT must be new or empty, unless "
        "--force.",
    )
    p.add_argument("out", type=Path, metavar="OUT")
    p.add_argument(
        "--force",
        action="store_true",
        help="write into OUT even if it holds files (replacing those of the same names)",
    )
    p.set_defaults(handler=cmd_export_onnx)


def cmd_import(args: argparse.Namespace) -> None:
    from vaswani.interop import import_hf

    check_output(args.out, "OUT", {"DIR": args.src}, folder=True, make_parents=True)
    out = import_hf(args.src, args.out)
    print(f"wrote run directory {out} (from {args.src})")


def cmd_export(args: argparse.Namespace) -> None:
    from vaswani.interop import export_hf

    check_output(args.out, "OUT", {"RUN_DIR": args.run_dir}, folder=True)
    from vaswani.interop.marian_folder import unread_target_side

    out = export_hf(args.run_dir, args.out)
    print(f"wrote Hugging Face model folder {out} (from {args.run_dir})")
    note = unread_target_side(out)
    if note is not None:
        print(note, file=sys.stderr)


def cmd_export_peft(args: argparse.Namespace) -> None:
    from vaswani.interop.peft import export_peft

    check_output(args.out, "OUT", {"RUN_DIR": args.run_dir}, folder=True)
    left_out = export_peft(args.run_dir, args.out)
    print(f"wrote PEFT adapter folder {args.out} (from {args.run_dir})")
    if left_out:
        print(
            f"vaswani: note: {len(left_out)} tensors trained in full ({left_out[0]}, …) are no part of the "
            "Hugging Face model and were left out; the run's model.safetensors has them",
            file=sys.stderr,
        )


def cmd_export_ctranslate2(args: argparse.Namespace) -> None:
    from vaswani.interop.ct2 import export_run

    check_output(args.out, "OUT", {"RUN_DIR": args.run_dir}, folder=True)
    out = export_run(args.run_dir, args.out, args.quantization)
    print(f"wrote CTranslate2 model folder {out} (from {args.run_dir})")


def cmd_export_onnx(args: argparse.Namespace) -> None:
    from vaswani.interop.onnx_export import export_run

    check_output(args.out, "OUT", {"RUN_DIR": args.run_dir}, folder=True)
    if args.force and is_run(args.out.resolve()):  # --force writes into a folder, never a run's
        raise ConfigError(f"OUT {args.out}: is a run directory; write the graphs elsewhere")
    files = export_run(args.run_dir, args.out, args.force)
    print(f"wrote {', '.join(files)} in {args.out} (from {args.run_dir})")
