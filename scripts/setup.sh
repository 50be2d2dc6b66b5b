#!/usr/bin/env bash
# Set up ai4s-graph on a fresh Debian 12 machine (as root, or with sudo): the Debian packages the
# tools drive (VictoriaMetrics for telemetry; SLURM with munge, slurmdbd and MariaDB for the local
# cluster; fio for eval-cluster's storage benchmark, numactl for the node probe), PyTorch for the bundled workload, and this package
# (editable) with its test extras and the [hta] cross-check.
#
# Python: $PYTHON (default python3) when its pip may install packages (a pyenv/conda Python, as on
# the project's CI machines); otherwise (Debian's own python3 is "externally managed") a virtual
# environment in .venv, with its ai4s-graph linked into /usr/local/bin.
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
PKGS="victoria-metrics slurm-wlm slurmdbd munge mariadb-server fio numactl"
PY=${PYTHON:-python3}
use_venv=0
if ! $PY -m pip --version >/dev/null 2>&1 || \
   [ -n "$($PY -c 'import sys,sysconfig,os;p=os.path.join(sysconfig.get_path("stdlib"),"EXTERNALLY-MANAGED");print(p if os.path.exists(p) and sys.prefix==sys.base_prefix else "")')" ]; then
  use_venv=1
  PKGS="$PKGS python3-venv python3-pip"
fi
missing=""
for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  echo "setup: apt-get install$missing"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
fi
if [ "$use_venv" = 1 ]; then
  [ -x .venv/bin/python ] || $PY -m venv .venv
  PY=.venv/bin/python
fi
# PyTorch for the workload (the project's machine image keeps a CPU 2.13.0 wheel on disk; elsewhere
# pip takes PyPI's build). The analysis itself does not need torch.
$PY -c "import torch" 2>/dev/null || $PY -m pip install -q "torch==2.13.0" || $PY -m pip install -q torch
# The test extras, plus HolisticTraceAnalysis (the [hta] extra, from PyPI) so the suite's HTA
# cross-check tests run; TraceLens installs from GitHub ([tracelens]) and its tests skip without it.
$PY -m pip install -q -e ".[test,hta]"
if [ "$use_venv" = 1 ]; then
  $SUDO ln -sf "$PWD/.venv/bin/ai4s-graph" /usr/local/bin/ai4s-graph
fi
bin="$(dirname "$($PY -c 'import sys; print(sys.executable)')")/ai4s-graph"
[ -x "$bin" ] || bin="$(command -v ai4s-graph)"
echo "setup: done ($bin)"
