#!/usr/bin/env bash
# A screenshot of TensorBoard showing a run's event files, as a user sees them: TensorBoard
# itself (the reference venv's, headless) and headless Chromium (Debian's `chromium`).
#
#   tests/reference/tensorboard_screenshot.sh OUTPUT_DIR OUT.png [WIDTHxHEIGHT]
#
# OUTPUT_DIR holds run directories (each with tensorboard/): every run is one TensorBoard
# run. The Scalars page is shown filtered to train/loss, eval/loss, train/learning_rate and
# train/grad_norm, without smoothing (TensorBoard clips outliers by default). docs/tensorboard.md
# has the result.
set -euo pipefail
logdir=${1:?usage: tensorboard_screenshot.sh OUTPUT_DIR OUT.png [WIDTHxHEIGHT]}
out=${2:?usage: tensorboard_screenshot.sh OUTPUT_DIR OUT.png [WIDTHxHEIGHT]}
size=${3:-1600x1000}
python=${ODYSSEY_PYTHON:-${XDG_CACHE_HOME:-$HOME/.cache}/odyssey/venv-torch-2.11.0/bin/python}
command -v chromium >/dev/null || { echo "tensorboard_screenshot: chromium is missing (apt install chromium)" >&2; exit 2; }
port=$("$python" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
"$python" -m tensorboard.main --logdir "$logdir" --port "$port" --host 127.0.0.1 >/tmp/tensorboard-$port.log 2>&1 &
tb=$!
trap 'kill $tb 2>/dev/null || true' EXIT
for _ in $(seq 1 60); do
  curl -sf -o /dev/null "http://127.0.0.1:$port/data/runs" && break
  sleep 0.5
done
curl -sf "http://127.0.0.1:$port/data/runs" || { cat /tmp/tensorboard-$port.log; echo "tensorboard did not start" >&2; exit 1; }
echo
tags='train%2Floss%7Ceval%2Floss%7Ctrain%2Flearning_rate%7Ctrain%2Fgrad_norm'
chromium --headless=new --no-sandbox --disable-gpu --hide-scrollbars --window-size="${size/x/,}" \
  --virtual-time-budget=30000 --screenshot="$out" \
  "http://127.0.0.1:$port/?darkMode=false#scalars&_smoothingWeight=0&tagFilter=$tags" 2>/dev/null
[ -s "$out" ] || { echo "chromium wrote no screenshot" >&2; exit 1; }
echo "wrote $out"
