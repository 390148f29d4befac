#!/usr/bin/env bash
# Installs what kvrl needs to build and test, idempotently, and says what it did.
#   scripts/setup.sh          build dependencies: Debian packages and the torch wheel
#   scripts/setup.sh --test   also the Python reference stack used by the tests
# The torch wheel lives in a venv under $KVRL_CACHE (default ~/.cache/kvrl), outside
# the checkout, and is reused when present.
set -euo pipefail

KVRL_CACHE="${KVRL_CACHE:-$HOME/.cache/kvrl}"
VENV="$KVRL_CACHE/venv"
# Pinned together. TransformerModule (the reference the tests compare against) is only in
# torchrl-nightly on PyPI; the 0.14 release does not have it.
TORCH_VERSION="${KVRL_TORCH_VERSION:-2.15.0}"
# The MuJoCo C library (mujoco-core: headers and libmujoco.so.<version>) and Gymnasium,
# whose package holds the locomotion model XML files: the native MuJoCo environments.
MUJOCO_VERSION="${KVRL_MUJOCO_VERSION:-4.0.1}"
GYMNASIUM_VERSION="1.4.0"
TEST_PACKAGES=(torchrl-nightly==2026.10.27 tensordict-nightly==2026.10.26 "gymnasium==$GYMNASIUM_VERSION"
               "mujoco==$MUJOCO_VERSION" imageio==2.38.2 popgym==1.0.7 numpy pytest matplotlib "tensorboard==2.21.0"
               minatar==1.0.15 minigrid==3.2.0)  # the last two: bench/learning_runs.py's image tasks
APT_PACKAGES=(openmpi-bin libopenmpi-dev libboost-dev libspdlog-dev libgtest-dev
              libyaml-cpp-dev nlohmann-json3-dev libcli11-dev pybind11-dev cmake g++ clang clang-format clang-tidy
              python3-venv)

with_test=0
for arg in "$@"; do
  case "$arg" in
    --test) with_test=1 ;;
    *) echo "setup.sh: unknown argument '$arg' (allowed: --test)" >&2; exit 2 ;;
  esac
done

say() { echo "[setup] $*"; }

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
  mkdir -p "$KVRL_CACHE"; $SUDO apt-get update -qq
  if ! DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >"$KVRL_CACHE/apt.log" 2>&1; then
    echo "setup.sh: apt-get could not install: ${missing[*]}" >&2; exit 1
  fi
else
  say "Debian packages present"
fi

PYTHON="${KVRL_PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
  say "creating venv $VENV"
  mkdir -p "$KVRL_CACHE"
  "$PYTHON" -m venv "$VENV"
fi

pip_install() {
  if ! "$VENV/bin/python" -m pip install -q --disable-pip-version-check "$@"; then
    echo "setup.sh: pip could not install: $*" >&2; exit 1
  fi
}

have_torch=$("$VENV/bin/python" -c 'import torch; print(torch.__version__.split("+")[0])' 2>/dev/null || true)
if [ "$have_torch" != "$TORCH_VERSION" ]; then
  say "installing torch==$TORCH_VERSION into $VENV (large download, once)"
  pip_install "torch==$TORCH_VERSION"
else
  say "torch $have_torch present in $VENV"
fi

# Located from the files, not by importing: mujoco-core ships no Python module of its own.
site_packages=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
mujoco_library="$site_packages/mujoco/libmujoco.so.$MUJOCO_VERSION"
mujoco_models="$site_packages/gymnasium/envs/mujoco/assets"
have_gymnasium=$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("gymnasium"))' 2>/dev/null || true)
if [ ! -f "$mujoco_library" ] || [ ! -f "$mujoco_models/hopper.xml" ] || [ "$have_gymnasium" != "$GYMNASIUM_VERSION" ]; then
  say "installing mujoco-core==$MUJOCO_VERSION and gymnasium==$GYMNASIUM_VERSION into $VENV"
  pip_install "mujoco-core==$MUJOCO_VERSION" "gymnasium==$GYMNASIUM_VERSION"
else
  say "MuJoCo $MUJOCO_VERSION and Gymnasium $have_gymnasium present in $VENV"
fi
echo "$site_packages/mujoco" > "$KVRL_CACHE/mujoco_prefix"
echo "$mujoco_models" > "$KVRL_CACHE/mujoco_model_dir"
say "MuJoCo library: $mujoco_library; model XML: $mujoco_models"

if [ "$with_test" -eq 1 ]; then
  if ! "$VENV/bin/python" -c "import torchrl, tensordict, gymnasium, popgym, matplotlib, tensorboard, imageio, mujoco, minatar, minigrid; from torchrl.modules import TransformerModule; import gymnasium.envs.mujoco" 2>/dev/null; then
    say "installing test packages: ${TEST_PACKAGES[*]}"
    pip_install "torch==$TORCH_VERSION" "${TEST_PACKAGES[@]}"
  else
    say "test packages present"
  fi
fi

"$VENV/bin/python" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)' > "$KVRL_CACHE/torch_prefix"
say "LibTorch CMake prefix: $(cat "$KVRL_CACHE/torch_prefix")"
