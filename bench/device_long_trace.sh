#!/usr/bin/env bash
# The issue-29 benchmark (bench/bench_long_trace.py) on a machine with no network: the device
# machines of bench/README-long-trace.md. What it needs travels with the checkout, made here first:
#   .whlb/  Python 3.12 manylinux wheels of the project's dependencies the device lacks (pip download,
#           bench/README-long-trace.md) and the victoria-metrics binary (gzip -9 of /usr/bin/victoria-metrics:
#           the checkout and what it carries must stay under 64 MiB) and, in .whlb/lib, the libzstd.so.1
#           it links (used only where the device has none);
#   .tlsite/ TraceLens installed with `pip install --no-deps --target .tlsite <TraceLens checkout>`.
# Usage (on the device, in the checkout): bash bench/device_long_trace.sh setup   (install, make the traces)
#                                          bash bench/device_long_trace.sh bench   (the measurement)
# Traces go to /tmp/bigtraces; the bench writes bench/RESULTS.md and README.md's scale table, which
# the caller brings back ($OUT).
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=/tmp/site NCCL_NVLS_ENABLE=0
export PATH=/tmp/bin:$PATH
T=/tmp/bigtraces
case "${1:-}" in
  setup)
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whlb/*.whl
    mkdir -p /tmp/vm /tmp/bin
    gunzip -c .whlb/victoria-metrics.gz > /tmp/vm/victoria-metrics
    if [ -d .whlb/lib ]; then cp -r .whlb/lib /tmp/vm/; fi
    # its libzstd.so.1 from the kit only where the device has none (ldd: the one library beyond libc)
    printf '#!/bin/sh\nexec env LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}/tmp/vm/lib" /tmp/vm/victoria-metrics "$@"\n' \
        > /tmp/bin/victoria-metrics
    chmod +x /tmp/vm/victoria-metrics /tmp/bin/victoria-metrics
    python3 -c "import ai4s_graph.cli, msgspec, langgraph" && victoria-metrics -version | head -1
    mkdir -p $T
    python3 bench/make_long_trace.py --size-mb 176 --out $T/repl-176mb.json.gz
    python3 bench/make_long_trace.py --size-mb 1000 --out $T/1gb_rank0.json.gz
    ;;
  bench)
    python3 bench/bench_long_trace.py --trace $T/repl-176mb.json.gz --tracelens-path "$PWD/.tlsite" \
        --big-trace $T/1gb_rank0.json.gz --curve-dir $T/curve --scratch /tmp/ai4s-bench-long \
        --results bench/RESULTS.md --readme README.md "${@:2}"
    ;;
  *) echo "usage: $0 setup|bench [bench_long_trace.py options]" >&2; exit 2 ;;
esac
