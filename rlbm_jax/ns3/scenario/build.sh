#!/usr/bin/env bash
# Build the ns-3.37 reference scenario.
#
#   rlbm_jax/ns3/scenario/build.sh [OUTPUT_BINARY]
#
# Default output: build/rlbm_scenario next to this script.  Needs ns-3.37's
# development files (Debian's libns3-dev) and pkg-config: the source tree's
# scripts/install_ns3.sh installs them (the README's test command runs it); this
# script installs nothing.  Skips the compile when the binary is newer than the
# source.  The last line of stdout is the binary's path.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
src="$here/rlbm_scenario.cc"
out="${1:-$here/build/rlbm_scenario}"
modules=(ns3-core ns3-network ns3-internet ns3-point-to-point ns3-applications ns3-traffic-control)

die() {
    echo "build.sh: $*" >&2
    exit 1
}

have_ns3() {
    command -v pkg-config >/dev/null 2>&1 && pkg-config --exists "${modules[@]}"
}

# one build at a time: test workers and calibration runs may call this together
mkdir -p "$here/build"
if command -v flock >/dev/null 2>&1; then
    exec 9>"$here/build/.lock"
    flock 9
fi

have_ns3 || die "ns-3 not found: install ns-3.37's development files (Debian: libns3-dev) and pkg-config; \
scripts/install_ns3.sh in the source tree does"

[ -f "$src" ] || die "source not found: $src"
mkdir -p "$(dirname "$out")"
out="$(cd "$(dirname "$out")" && pwd)/$(basename "$out")"

if [ -x "$out" ] && [ "$out" -nt "$src" ]; then
    echo "$out"
    exit 0
fi

# Debian's ns-3 .pc files name the GSL link libraries by absolute path, which only
# exist with libgsl-dev; ns-3's own libraries already link GSL, so such missing
# paths are dropped.  --no-as-needed keeps every module's TypeIds registered.
flags=()
for f in $(pkg-config --cflags --libs "${modules[@]}"); do
    case "$f" in
    /*) [ -e "$f" ] || continue ;;
    esac
    flags+=("$f")
done

echo "build.sh: compiling $src" >&2
if ! g++ -O2 -std=c++17 "$src" -Wl,--no-as-needed "${flags[@]}" -o "$out.tmp"; then
    rm -f "$out.tmp"
    die "compilation failed"
fi
mv -f "$out.tmp" "$out"
echo "$out"
