#!/usr/bin/env python3
"""TensorBoard event files of zero-train (ctest zero_train_tensorboard), read back with the
tensorboard package's own record reader and Event message:

    check_tensorboard.py ZERO_RUN ZERO_TRAIN WORK_DIR

A 2-rank run with the config's tensorboard and csv_monitor sections writes one event file; the
reader parses every record, and this script checks each record's framing CRCs itself (CRC-32C,
masked as TFRecord does); the file version comes first; Train/Samples/train_loss and
Train/Samples/lr equal csv_monitor's rows at the same steps (the x axis in samples), and
Train/Samples/grad_norm, Train/Samples/tokens_per_second and Train/Samples/val_loss are there
at every step (val_loss at the evaluation steps). Skipped (exit 77) without tensorboard.
"""
import csv
import glob
import json
import os
import struct
import subprocess
import sys

try:
    from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
    from tensorboard.compat.proto import event_pb2
except ImportError:
    print("the tensorboard package is not installed: skipped")
    sys.exit(77)

zero_run, zero_train, work = sys.argv[1:4]
os.makedirs(work, exist_ok=True)
config = {
    "train_micro_batch_size_per_gpu": 2, "gradient_clipping": 1.0,
    "optimizer": {"type": "AdamW", "params": {"lr": 1e-3}},
    "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 1e-3,
                                                 "warmup_num_steps": 3}},
    "zero_optimization": {"stage": 2},
    "tensorboard": {"enabled": True, "output_path": os.path.join(work, "tb"), "job_name": "job"},
    "csv_monitor": {"enabled": True, "output_path": os.path.join(work, "csv"), "job_name": "job"},
}
for old in glob.glob(os.path.join(work, "*", "job", "*")):
    os.remove(old)
with open(os.path.join(work, "config.json"), "w") as f:
    json.dump(config, f)
repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
subprocess.run([zero_run, "-n", "2", "--", zero_train, "--config", os.path.join(work, "config.json"),
                "--steps", "6", "--eval-every", "3", "--eval-batches", "1", "--seq-len", "32",
                "--sample-tokens", "2", "--out", os.path.join(work, "run")],
               check=True, stdout=subprocess.DEVNULL, cwd=repo)
files = glob.glob(os.path.join(work, "tb", "job", "events.out.tfevents.*"))
assert len(files) == 1, files
path = files[0]


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(data):
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


raw = open(path, "rb").read()
at, records = 0, 0
while at < len(raw):
    (length,) = struct.unpack_from("<Q", raw, at)
    (length_crc,) = struct.unpack_from("<I", raw, at + 8)
    assert length_crc == masked(raw[at:at + 8]), f"record {records}: bad length CRC"
    data = raw[at + 12:at + 12 + length]
    (data_crc,) = struct.unpack_from("<I", raw, at + 12 + length)
    assert data_crc == masked(data), f"record {records}: bad data CRC"
    at += 12 + length + 4
    records += 1
# TensorBoard's own record reader, and its Event message.
events = [event_pb2.Event.FromString(raw) for raw in RawEventFileLoader(path).Load()]
assert len(events) == records, (len(events), records)
assert events[0].file_version == "brain.Event:2", events[0]
scalars = {}
for event in events[1:]:
    for value in event.summary.value:
        assert value.HasField("simple_value"), value
        scalars.setdefault(value.tag, {})[event.step] = value.simple_value
batch = 2 * 2  # 2 ranks x 2 rows
steps = [batch * s for s in range(1, 7)]
for tag in ("Train/Samples/train_loss", "Train/Samples/lr", "Train/Samples/grad_norm",
            "Train/Samples/tokens_per_second"):
    assert sorted(scalars.get(tag, {})) == steps, (tag, scalars.get(tag))
assert sorted(scalars["Train/Samples/val_loss"]) == [batch * 3, batch * 6], scalars["Train/Samples/val_loss"]
for tag in ("Train/Samples/train_loss", "Train/Samples/lr"):
    with open(os.path.join(work, "csv", "job", tag.replace("/", "_") + ".csv")) as f:
        rows = {int(r["step"]): float(r[tag.rsplit("/", 1)[1]]) for r in csv.DictReader(f)}
    for step, value in scalars[tag].items():
        assert abs(value - rows[step]) <= 1e-6 * max(1.0, abs(rows[step])), (tag, step, value, rows[step])
assert scalars["Train/Samples/lr"][batch] < scalars["Train/Samples/lr"][batch * 3]  # warming up
print(f"tensorboard: {records} records in {path}, every CRC good; "
      f"{sorted(scalars)} at the expected steps, equal to csv_monitor's rows")
