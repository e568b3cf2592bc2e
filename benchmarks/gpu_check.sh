#!/usr/bin/env bash
# The GPU check of issue 13, as one script that a session with a GPU (one H200) runs once.
#
# How: from the repository root, with the package importable (`pip install -e .`, or nothing: the script
# puts src/ on PYTHONPATH itself), e.g. through the device tool as the command
#     bash benchmarks/gpu_check.sh
# with timeout_s 600; it should take well under 10 minutes on one H200 (most of it the translation job).
# It prints, in order:
#   1. nvidia-smi, then the versions of python, torch (and its CUDA) and transformers;
#   2. python benchmarks/gpt_speed.py --device cuda --steps 200: the GPT benchmark shape (6 layers, 384
#      dims, context 256) against Hugging Face's GPT2LMHeadModel on the same weights, fp32 and bf16:
#      training tokens/s, MFU against the matmul peaks measured in the same run on the GPU, peak CUDA
#      memory of training, greedy generation against HF generate (tokens/s, same tokens), as a table;
#   3. the default translation job end to end on the GPU (vaswani train translation --device cuda): its
#      evaluations, test BLEU and total time, then the wall time of the command;
#   4. vaswani translate of that run directory on the GPU and on the CPU (a run directory does not
#      depend on the device it was trained on), and whether both give the same translation.
# Everything goes to stdout and to $OUT/gpu_check.txt ($OUT: the folder the device tool returns; a new
# temporary folder where it is unset), the run directory to $OUT/zh. benchmarks/processes.py is CPU
# only: not run here.
#
# Switches (environment): DEVICE=cuda:N for another GPU, DEVICE=cpu for the CPU equivalent (no
# nvidia-smi); QUICK=1 for a smoke run in about a minute on 2 cores: gpt_speed.py --quick and a
# 30-step translation job on 2,000 sentence pairs (its BLEU means nothing); PYTHON=... (default python3).
#     DEVICE=cpu QUICK=1 bash benchmarks/gpu_check.sh
set -euo pipefail

cd "$(dirname "$0")/.."
OUT=${OUT:-$(mktemp -d)}
DEVICE=${DEVICE:-cuda}
QUICK=${QUICK:-}
PYTHON=${PYTHON:-python3}
SENTENCE="Tom chases Jerry"
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1

check() {
    echo "== gpu_check.sh: DEVICE=$DEVICE QUICK=${QUICK:-0} OUT=$OUT, $(date -u '+%Y-%m-%d %H:%M UTC')"
    if [[ $DEVICE == cuda* ]]; then
        nvidia-smi
    fi
    "$PYTHON" -c 'import platform, torch, transformers; print(f"python {platform.python_version()}, torch \
{torch.__version__} (CUDA {torch.version.cuda}, GPU visible: {torch.cuda.is_available()}), transformers \
{transformers.__version__}")'

    echo "== 1. GPT benchmark shape: ours against GPT2LMHeadModel"
    local speed=(--steps 200)
    local train=()
    if [[ -n $QUICK ]]; then
        speed=(--quick)
        train=(--max-steps 30 --n-train 2000 --n-valid 50 --n-test 50 --eval-every 15 --eval-sentences 50)
    fi
    "$PYTHON" benchmarks/gpt_speed.py --device "$DEVICE" "${speed[@]}"

    echo "== 2. the default translation job end to end"
    local start=$SECONDS
    "$PYTHON" -m vaswani train translation --device "$DEVICE" --out "$OUT/zh" --quiet "${train[@]}"
    echo "translation job: $((SECONDS - start)) s wall, vaswani train translation --device $DEVICE"

    echo "== 3. decoding the run directory on $DEVICE and on the CPU"
    local here there
    here=$("$PYTHON" -m vaswani translate "$OUT/zh" "$SENTENCE" --device "$DEVICE")
    there=$("$PYTHON" -m vaswani translate "$OUT/zh" "$SENTENCE" --device cpu)
    echo "--device $DEVICE: $SENTENCE → $here"
    echo "--device cpu: $SENTENCE → $there"
    if [[ $here == "$there" ]]; then
        echo "same translation on $DEVICE and cpu: yes"
    else
        echo "same translation on $DEVICE and cpu: no"
    fi
    echo "== gpu_check.sh done, $(date -u '+%H:%M UTC')"
}

mkdir -p "$OUT"
check 2>&1 | tee "$OUT/gpu_check.txt"
