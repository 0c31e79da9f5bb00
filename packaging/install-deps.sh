#!/usr/bin/env bash
# Installs everything Odyssey needs to build and test on Debian 12, idempotently:
# Debian packages (Qt 6, its lupdate/lrelease and zh_CN catalogue, a CJK font, QCustomPlot,
# yaml-cpp, nlohmann-json, PCRE2, Xvfb, ccache, clang for libFuzzer, the Debian package's
# tools: help2man, patchelf, debootstrap, appstream) and LibTorch from PyPI's
# torch wheel in a virtual environment.
#
#   packaging/install-deps.sh [--no-torch]
#
# Environment:
#   ODYSSEY_VENV   where the torch virtual environment lives
#                  (default: ${XDG_CACHE_HOME:-$HOME/.cache}/odyssey/venv-torch-2.11.0)
#   ODYSSEY_TORCH  torch version to install (default 2.11.0, the GPU machines' version)
# The same environment gets the pinned reference libraries (transformers, PEFT, bitsandbytes,
# tokenizers, safetensors, tensorboard) that the parity tests use as oracles; ms-swift 4.6.0
# (the bridge's oracle) gets one layered over it (ODYSSEY_SWIFT_VENV, default venv-swift-4.6.0).
set -euo pipefail

want_torch=1
for a in "$@"; do
  case "$a" in
    --no-torch) want_torch=0 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "install-deps: unknown argument '$a' (expected --no-torch or --help)" >&2; exit 2 ;;
  esac
done

torch_version=${ODYSSEY_TORCH:-2.11.0}
# The reference libraries the parity tests compare against (the GPU machines' versions), and
# tensorboard, whose own reader checks the event files runs write (tests/reference/tensorboard_oracle.py),
# and matplotlib, with which tests/bench/compare.py draws the speed-memory frontier.
py_reference=(transformers==5.17.0 peft==0.21.0 tokenizers==0.23.3 safetensors==0.8.0 numpy==2.4.6 bitsandbytes==0.50.2
              matplotlib==3.11.2
              tensorboard==2.21.0)
# galore-torch's GaLore AdamW is the GaLore oracle (tests/reference/galore_reference.py). It is
# installed without its declared bitsandbytes dependency: only its 8-bit optimizers need that,
# and the oracle loads the AdamW module alone.
# nvidia-cudnn-frontend: its C++ headers (site-packages/include, header-only) let kernels/ build
# the soft-capped attention through cuDNN's graph API (kernels/cudnn_attention.h) against the
# libcudnn the torch wheel brings; its Python part is not used.
py_reference_nodeps=(galore-torch==1.0 nvidia-cudnn-frontend==1.32.0)
venv=${ODYSSEY_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/odyssey/venv-torch-$torch_version}
swift_version=4.6.0
swift_venv=${ODYSSEY_SWIFT_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/odyssey/venv-swift-$swift_version}

debs=(
  build-essential cmake ninja-build ccache pkg-config git
  qt6-base-dev qt6-base-dev-tools libgl-dev
  qt6-l10n-tools qt6-translations-l10n fonts-wqy-microhei
  libqcustomplot-dev libqcustomplot2.1-qt6
  libyaml-cpp-dev nlohmann-json3-dev libpcre2-dev
  xvfb xauth
  clang libclang-rt-14-dev clang-format-14
  python3 python3-venv python3-pip
  help2man patchelf debootstrap appstream desktop-file-utils libxml2-utils
)

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "install-deps: not root and no sudo; install these Debian packages first: ${debs[*]}" >&2; exit 1; }
  sudo_cmd=(sudo)
fi

missing=()
for p in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -q
  "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "install-deps: Debian packages present"
fi

if [ "$want_torch" = 1 ]; then
  if [ -x "$venv/bin/python" ] && "$venv/bin/python" -W ignore -c "import torch,sys; sys.exit(0 if torch.__version__.split('+')[0]=='$torch_version' else 1)" 2>/dev/null; then
    echo "install-deps: torch $torch_version present in $venv"
  else
    echo "install-deps: installing torch==$torch_version into $venv (a few GB, once)"
    mkdir -p "$(dirname "$venv")"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install -q --upgrade pip
    "$venv/bin/python" -m pip install -q "torch==$torch_version"
  fi
  if "$venv/bin/python" - "${py_reference[@]}" "${py_reference_nodeps[@]}" <<'PY'
import sys
from importlib.metadata import PackageNotFoundError, version
def have(spec):
    name, want = spec.split("==")
    try:
        return version(name) == want
    except PackageNotFoundError:
        return False
sys.exit(0 if all(have(s) for s in sys.argv[1:]) else 1)
PY
  then
    echo "install-deps: reference libraries present (${py_reference[*]} ${py_reference_nodeps[*]})"
  else
    echo "install-deps: installing reference libraries: ${py_reference[*]} ${py_reference_nodeps[*]}"
    "$venv/bin/python" -m pip install -q "${py_reference[@]}"
    "$venv/bin/python" -m pip install -q --no-deps "${py_reference_nodeps[@]}"
  fi
  "$venv/bin/python" -W ignore -c "import torch; print('install-deps: LibTorch', torch.__version__, 'at', torch.utils.cmake_prefix_path)"

  # ms-swift, whose own argument parser checks the ms-swift bridge (tests/reference/swift_corpus.py).
  # It pins peft<0.21, so it gets a virtual environment of its own layered over the reference one
  # (a .pth file adds the reference site-packages after its own): torch and transformers are
  # shared, peft 0.20 shadows 0.21 there only.
  if "$swift_venv/bin/python" -c "import sys; from importlib.metadata import version; sys.exit(0 if version('ms-swift') == '$swift_version' else 1)" 2>/dev/null; then
    echo "install-deps: ms-swift $swift_version present in $swift_venv"
  else
    echo "install-deps: installing ms-swift==$swift_version into $swift_venv (layered over $venv)"
    base=$("$venv/bin/python" -c 'import sys; print(sys._base_executable)')
    "$base" -m venv "$swift_venv"
    ref_site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    swift_site=$("$swift_venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    echo "$ref_site" > "$swift_site/zz_odyssey_reference.pth"
    "$swift_venv/bin/python" -m pip install -q "ms-swift==$swift_version"
  fi
fi
