#!/usr/bin/env bash
# The CLI half of issue 22's closing note: a hub id from a Hugging Face cache (blobs, refs/main,
# snapshots/<commit>) trains from a fresh clone's build. Usage: cache_id_run.sh CLONE BUILD_DIR
set -euo pipefail
CLONE=$1; BUILD=$2
T=$(mktemp -d)
REV=0123456789abcdef0123456789abcdef01234567
H=$T/hf/hub/models--odyssey-test--quickstart-qwen2
mkdir -p "$H/blobs" "$H/refs" "$H/snapshots/$REV"
for f in "$CLONE"/resources/quickstart/model/*; do
  b=$(sha256sum "$f" | cut -c1-64)
  cp "$f" "$H/blobs/$b"
  ln -s "../../blobs/$b" "$H/snapshots/$REV/$(basename "$f")"
done
printf '%s' $REV > "$H/refs/main"
sed -e "s|^model:.*|model: odyssey-test/quickstart-qwen2|" -e "s|^max_steps:.*|max_steps: 3|" \
  "$CLONE/presets/quickstart.yaml" > "$T/cache.yaml"
# Dataset paths in the quickstart are relative to its folder: point them at the clone's.
sed -i -e "s|\.\./resources/|$CLONE/resources/|g" "$T/cache.yaml"
cd "$T"
echo "== validate"; HF_HOME=$T/hf "$BUILD/app/odyssey-train" validate cache.yaml --check-files
echo "== run"; HF_HOME=$T/hf "$BUILD/app/odyssey-train" run cache.yaml --set output_dir=$T/out 2>&1 | tail -5
RUN=$(ls -d $T/out/*/ | head -1)
echo "== config.yaml of the run"; grep -E "^model|^model_revision|resolved" "$RUN/config.yaml" | head
echo "== status"; python3 -c "import json;print(json.load(open('$RUN/status.json'))['state'])"
