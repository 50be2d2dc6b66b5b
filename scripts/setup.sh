#!/usr/bin/env bash
# Set up ai4s-graph on a fresh Debian 12 machine (as root, or with sudo): the Debian packages the
# tools drive (VictoriaMetrics for telemetry; SLURM with munge, slurmdbd and MariaDB for the local
# cluster; fio for the storage scan), a CPU build of PyTorch for the bundled workload, and the
# package itself (editable) with its test extras.
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
PKGS="victoria-metrics slurm-wlm slurmdbd munge mariadb-server fio numactl"
missing=""
for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  echo "setup: apt-get install$missing"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
fi
PY=${PYTHON:-python3}
# CPU PyTorch for the workload (the machine image keeps a 2.13.0 wheel on disk; elsewhere pip
# downloads it). The analysis itself does not need torch.
$PY -c "import torch" 2>/dev/null || $PY -m pip install -q "torch==2.13.0" || $PY -m pip install -q torch
$PY -m pip install -q -e ".[test]"
echo "setup: done ($(command -v ai4s-graph))"
