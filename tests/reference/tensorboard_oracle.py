"""Oracle for tests/core/tst_tensorboard.cpp: reads a directory of tfevents files with
TensorBoard's own code, not with the code under test.

    tensorboard_oracle.py DIR

stdout, one JSON object:
  {"files": [{"name": str, "records": int, "error": str|null, "file_version": str|null}],
   "scalars": {tag: [[step, value, wall_time], ...]},
   "texts": {tag: [[step, text, plugin_name], ...]}}

"files" comes from TensorBoard's record reader (the one its event loader uses without
TensorFlow), which checks each frame's length and both CRCs; the loader itself stops quietly
at a bad frame, so a framing error would otherwise only show as missing values. "scalars"
and "texts" come from EventAccumulator with nothing sampled away. Non-finite values are
written as the strings "NaN", "Infinity" and "-Infinity" (JSON has no NaN).
Exit code 3: tensorboard is not installed (bash packaging/install-deps.sh installs it).
"""
import json
import math
import os
import sys

try:
    from tensorboard.backend.event_processing import event_accumulator
    from tensorboard.compat.proto import event_pb2
    from tensorboard.compat.tensorflow_stub import errors
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import PyRecordReader_New
    from tensorboard.util import tensor_util
except ImportError as e:
    print(f"tensorboard_oracle.py: tensorboard is not installed ({e}); bash packaging/install-deps.sh installs it",
          file=sys.stderr)
    sys.exit(3)


def number(v):
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    return v


def read_frames(path):
    """Every record of one file, strictly: the first framing or CRC error is reported."""
    out = {"name": os.path.basename(path), "records": 0, "error": None, "file_version": None}
    reader = PyRecordReader_New(path)
    while True:
        try:
            reader.GetNext()
        except errors.OutOfRangeError:
            break
        except errors.DataLossError as e:
            out["error"] = str(e.message if hasattr(e, "message") else e)
            break
        if out["records"] == 0:
            ev = event_pb2.Event.FromString(reader.record())
            out["file_version"] = ev.file_version if ev.HasField("file_version") else None
        out["records"] += 1
    return out


def main():
    logdir = sys.argv[1]
    files = sorted(f for f in os.listdir(logdir) if "tfevents" in f)
    result = {"files": [read_frames(os.path.join(logdir, f)) for f in files], "scalars": {}, "texts": {}}

    acc = event_accumulator.EventAccumulator(logdir, size_guidance=event_accumulator.STORE_EVERYTHING_SIZE_GUIDANCE)
    acc.Reload()
    tags = acc.Tags()
    for tag in tags["scalars"]:
        result["scalars"][tag] = [[e.step, number(e.value), e.wall_time] for e in acc.Scalars(tag)]
    for tag in tags["tensors"]:
        plugin = acc.SummaryMetadata(tag).plugin_data.plugin_name
        rows = []
        for e in acc.Tensors(tag):
            arr = tensor_util.make_ndarray(e.tensor_proto)
            if arr.shape != ():
                raise SystemExit(f"tensorboard_oracle.py: {tag} at step {e.step} is not a scalar string: {arr.shape}")
            v = arr.item()
            rows.append([e.step, v.decode("utf-8") if isinstance(v, bytes) else str(v), plugin])
        result["texts"][tag] = rows
    json.dump(result, sys.stdout)


if __name__ == "__main__":
    main()
