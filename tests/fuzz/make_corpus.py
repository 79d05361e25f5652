#!/usr/bin/env python3
"""Writes the seed corpus of the fuzz targets (tests/fuzz/corpus/<target>/): small valid inputs
of every format, from which libFuzzer mutates. The snapshot seeds come from a real snapshot:
pass the folder of one (gpipe_train --model mlp --layers 3 --width 8 --in-features 4 --classes 3
--dataset synthetic --balance 2,2 --steps 1 --snapshot-dir DIR) as the only argument.
Run from the repository root: python3 tests/fuzz/make_corpus.py [SNAPSHOT_STEP_DIR]."""
import gzip, io, os, shutil, struct, sys

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")

def put(target, name, data):
    os.makedirs(os.path.join(root, target), exist_ok=True)
    with open(os.path.join(root, target, name), "wb") as f:
        f.write(data)

# IDX: a 2x3x3 image array and a label vector, plain and gzipped.
images = bytes([0, 0, 8, 3]) + struct.pack(">III", 2, 3, 3) + bytes(range(18))
labels = bytes([0, 0, 8, 1]) + struct.pack(">I", 4) + bytes([0, 1, 2, 9])
put("idx", "images.idx", images)
put("idx", "labels.idx", labels)
put("idx", "images.idx.gz", gzip.compress(images, mtime=0))

# CIFAR-10: two records of label + 3072 planar pixels.
put("cifar", "two_records.bin", bytes([3]) + bytes(i % 256 for i in range(3072)) +
    bytes([7]) + bytes((3 * i) % 256 for i in range(3072)))

# Images: first byte 0 = colour, 1 = grayscale; then a PNG / JPEG / BMP file.
from PIL import Image
picture = Image.new("RGB", (5, 4))
picture.putdata([(x * 40, y * 60, 128) for y in range(4) for x in range(5)])
for fmt, mode in (("PNG", "RGB"), ("JPEG", "RGB"), ("BMP", "RGB"), ("PNG", "L")):
    buf = io.BytesIO()
    picture.convert(mode).save(buf, fmt)
    put("image", f"{fmt.lower()}_{mode}.bin", bytes([1 if mode == "L" else 0]) + buf.getvalue())

# Parsers: the first byte picks devices, ints, doubles, bytes, plan shape, size config, classes,
# schedule file.
for i, text in enumerate(["cpu:0,cpu:1,cpu:2", "3,3,2", "0.5,1e-3,2", "512MiB",
                          "K=2,R=1,M=8,schedule=zb-h1,v=1,checkpoint=except_last",
                          "pipeline-4", "0-4,7",
                          "# zb-h1 K=2 M=2\nF0.0 F1.0 B0.0 W0.0 B1.0 W1.0\n"
                          "F0.1 B0.1 F1.1 B1.1 W0.1 W1.1\n"]):
    put("parsers", f"parser_{i}.txt", bytes([i]) + text.encode())

# Config: the committed presets.
presets = os.path.join(os.path.dirname(root), "..", "..", "experiments", "presets")
for name in sorted(os.listdir(presets)):
    with open(os.path.join(presets, name), "rb") as f:
        put("config", name, f.read())

# Snapshot: 0 + a stage shard, 1 + a manifest.
if len(sys.argv) > 1:
    with open(os.path.join(sys.argv[1], "stage-0.pt"), "rb") as f:
        put("snapshot", "shard.bin", bytes([0]) + f.read())
    with open(os.path.join(sys.argv[1], "manifest.json"), "rb") as f:
        put("snapshot", "manifest.bin", bytes([1]) + f.read())
