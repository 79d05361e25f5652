# The configuration of issue 47 as engine_overhead flags, sourced by run.sh, ab.sh and
# breakdown.sh: AmoebaNet-D, L=6, D=64, 64x64 images (ImageNet stem), batch 64, on the CPU,
# the input resident, one round of timed steps per process after one warm-up step (each script
# adds its --steps).
amoebanet_d=(--device cpu --model amoebanet-d --layers 6 --filters 64 --image-size 64
  --batch-size 64 --input resident --rounds 1 --warmup 1)
