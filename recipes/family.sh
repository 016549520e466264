#!/bin/bash
# The whole recipe of recipes/README.md end to end, from the repository root, with a timestamp per stage:
#   bash recipes/family.sh > family.log 2>&1
# TRANSMITTER_THREADS (default 1, as the bundled family was trained) sets the torch threads of the three
# transmitter stages; 2 is faster and gives other weights of the same quality (docs/findings/transmitter-small.md).
# With one thread, stages 1b and 1c's data are prepared while stage 1 trains; with two, each stage prepares
# its own, with nothing beside it.
# FORWARD_THREADS (default 2) sets the torch threads of the forward passes of the transmitter stages that
# run alone: on the AVX-512 Xeon two give the one-thread weights bit for bit, 15 % faster per step.
# With one thread, stage 1 keeps one in its forward passes while the preparation runs on the other core
# (beside it, two made its steps more than twice as slow): it stops at step STAGE1_SPLIT (default 2500,
# just after the preparation ends on the AVX-512 Xeon), and once the preparation is done it resumes with
# FORWARD_THREADS. Resuming is exact, so the weights are those of one straight run.
# The latents read the encoder batches stage 1 cached (the same tensors); the text latents are refined
# against their objects for 100 steps, with the supervision stage 1 cached.
# The two prior chains run side by side, one thread each; their output goes to runs/small/{text,image}_chain.log.
set -e
cd "$(dirname "$0")/.."
ts() { echo "[$(date +%s) $(date +%T)] $*"; }
ts start
export OMP_NUM_THREADS=1
T=${TRANSMITTER_THREADS:-1}
F=${FORWARD_THREADS:-2}
shap-e dataset runs/small/train --n 640 --split train --seed 0
shap-e dataset runs/small/train_image --n 1920 --split train --seed 0
ts datasets_done
PREPARE=
if [ "$T" = 1 ]; then
  # Stage 1's data on both cores; then stages 1b and 1c's data (they need no weights) on the core that
  # stage 1's one-thread steps leave idle. Each training run reads its records from the cache: the same
  # tensors, so the same weights.
  shap-e train transmitter --config recipes/transmitter-small.yaml --prepare-only
  ts stage1_prepared
  (
    shap-e train transmitter --config recipes/transmitter-small-encoder.yaml --prepare-only --data-workers 1
    shap-e train transmitter --config recipes/transmitter-small-encoder-2.yaml --prepare-only --data-workers 1
    ts stage1b_stage1c_prepared
  ) > runs/small/prepare.log 2>&1 &
  PREPARE=$!
fi
STAGE1="shap-e train transmitter --config recipes/transmitter-small.yaml"
if [ -n "$PREPARE" ]; then
  OMP_NUM_THREADS=$T $STAGE1 --forward-threads 1 --stop-at "${STAGE1_SPLIT:-2500}"
  ts stage1_split
  wait $PREPARE  # a failed preparation stops the script here: see runs/small/prepare.log
  OMP_NUM_THREADS=$T $STAGE1 --forward-threads $F --resume
else
  OMP_NUM_THREADS=$T $STAGE1 --forward-threads $F
fi
ts stage1_done
OMP_NUM_THREADS=$T shap-e train transmitter --config recipes/transmitter-small-encoder.yaml --forward-threads $F
ts stage1b_done
OMP_NUM_THREADS=$T shap-e train transmitter --config recipes/transmitter-small-encoder-2.yaml --forward-threads $F
ts stage1c_done
ENCODER=runs/small/transmitter_encoder_2/model.safetensors
# prior_chain STAGE DATA [latents options]: STAGE's latents of DATA from stage 1c's encoder (reading the
# encoder batches stage 1 cached), then STAGE's prior
prior_chain() {
  local stage=$1 data=$2
  shift 2
  shap-e latents "$data" --stage "$stage" -o "runs/small/latents_$stage.safetensors" \
    --transmitter shap_e/configs/transmitter_small_config.yaml --weights $ENCODER --cache-dir runs/small/cache "$@"
  ts "${stage}_latents_done"
  shap-e train "$stage" --config "recipes/$stage-small.yaml"
  ts "${stage}_done"
}
prior_chain text runs/small/train --text-tokens 24 --text-layers 0 --per-asset 16 --captions augmented --refine-steps 100 \
  > runs/small/text_chain.log 2>&1 &
TEXT_CHAIN=$!
prior_chain image runs/small/train_image --per-asset 4 > runs/small/image_chain.log 2>&1 &
IMAGE_CHAIN=$!
wait $TEXT_CHAIN  # a failed chain stops the script here (set -e): see its log
wait $IMAGE_CHAIN
ts family_done
