#!/usr/bin/env bash
# The window half: the same cache layout, a preset naming the hub id, Start pressed by
# `odyssey --screenshot DIR --live PRESET` (the real engine trains it), pages saved.
set -euo pipefail
CLONE=$1; BUILD=$2; SHOTS=$3
T=$(mktemp -d)
REV=0123456789abcdef0123456789abcdef01234567
H=$T/hf/hub/models--odyssey-test--quickstart-qwen2
mkdir -p "$H/blobs" "$H/refs" "$H/snapshots/$REV"
for f in "$CLONE"/resources/quickstart/model/*; do
  b=$(sha256sum "$f" | cut -c1-64); cp "$f" "$H/blobs/$b"; ln -s "../../blobs/$b" "$H/snapshots/$REV/$(basename "$f")"
done
printf '%s' $REV > "$H/refs/main"
sed -e "s|^model:.*|model: odyssey-test/quickstart-qwen2|" -e "s|\.\./resources/|$CLONE/resources/|g" \
  "$CLONE/presets/quickstart.yaml" > "$T/quickstart-cache-id.yaml"
mkdir -p "$SHOTS"
HF_HOME=$T/hf ODYSSEY_TRAIN_BIN=$BUILD/app/odyssey-train QT_QPA_PLATFORM=offscreen \
  timeout 600 "$BUILD/app/odyssey" --settings "$T/s.ini" --screenshot "$SHOTS" --live "$T/quickstart-cache-id.yaml"
grep -h "^model" /tmp/odyssey-screenshot-runs/*/config.yaml
