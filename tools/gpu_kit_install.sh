#!/bin/sh
# tailrl GPU kit installer: `make gpu-kit` copies this file to .gpu-kit/install.sh.
#
#   sh .gpu-kit/install.sh [TARGET]        (TARGET defaults to /tmp/tailrl-site)
#
# Reads MANIFEST.txt beside this script. For each archive whose parts are all present it joins them (cat),
# checks the sha256, extracts the wheels (tar) and runs
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target TARGET *.whl
# then stamps TARGET/.gpu-kit-NAME.sha256 so a re-run skips it (idempotent). An archive with parts missing
# gets one line naming them and is skipped, so parts can arrive over several device calls. Finally checks
# the `need` lines (requirements left to the machine's own packages; warnings only) and prints the
# PYTHONPATH hint. Exit 0 only when everything present installed cleanly (GPU_KIT_REQUIRE_ALL=1: missing
# parts also fail, status 3). Needs POSIX sh, cat, sha256sum, tar and python3 (PYTHON=... overrides it).
set -u
case "$0" in */*) KIT=${0%/*} ;; *) KIT=. ;; esac
TARGET=${1:-/tmp/tailrl-site}
PY=${PYTHON:-python3}
MANIFEST="$KIT/MANIFEST.txt"
FAIL=0
MISSING=0
if [ ! -f "$MANIFEST" ]; then
    echo "gpu-kit: $MANIFEST not found (carry it with the parts)" >&2
    exit 1
fi
WORK=$("$PY" -c 'import tempfile; print(tempfile.mkdtemp(prefix="gpu-kit."))') || exit 1

cleanup() { "$PY" -c 'import shutil, sys; shutil.rmtree(sys.argv[1], ignore_errors=True)' "$1"; }

# install_archive NAME FILE SHA256
install_archive() {
    parts=""
    missing=""
    while read -r kind arch file sha size; do
        [ "$kind" = part ] && [ "$arch" = "$1" ] || continue
        if [ -f "$KIT/$file" ]; then parts="$parts $KIT/$file"; else missing="$missing $file"; fi
    done <"$MANIFEST"
    if [ -n "$missing" ]; then
        echo "gpu-kit: $1: missing part(s):$missing -- carry them (under $KIT/) and run again; skipped"
        MISSING=1
        return 0
    fi
    stamp="$TARGET/.gpu-kit-$1.sha256"
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$3" ]; then
        echo "gpu-kit: $1: already installed in $TARGET"
        return 0
    fi
    dir="$WORK/$1"
    "$PY" -c 'import os, sys; os.makedirs(sys.argv[1])' "$dir" || { FAIL=1; return 0; }
    # shellcheck disable=SC2086  # part paths hold no spaces (manifest names; KIT as given)
    cat $parts >"$dir/$2" || { FAIL=1; return 0; }
    got=$(sha256sum "$dir/$2") && got=${got%% *}
    if [ "$got" != "$3" ]; then
        echo "gpu-kit: $1: sha256 mismatch for $2 (got $got, want $3)"
        while read -r kind arch file sha size; do
            [ "$kind" = part ] && [ "$arch" = "$1" ] || continue
            psha=$(sha256sum "$KIT/$file") && psha=${psha%% *}
            [ "$psha" = "$sha" ] || echo "gpu-kit: $1: bad part $file (sha256 $psha, want $sha); carry it again"
        done <"$MANIFEST"
        FAIL=1
        cleanup "$dir"
        return 0
    fi
    if ! tar -xf "$dir/$2" -C "$dir"; then
        echo "gpu-kit: $1: tar could not extract $2"
        FAIL=1
        return 0
    fi
    set -- "$1" "$2" "$3" "$dir"/*.whl
    name=$1 sum=$3
    shift 3
    if PIP_ROOT_USER_ACTION=ignore "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$TARGET" "$@" </dev/null; then
        echo "$sum" >"$stamp"
        echo "gpu-kit: $name: installed $# wheel(s) into $TARGET"
    else
        echo "gpu-kit: $name: pip install failed"
        FAIL=1
    fi
    cleanup "$dir"
}

ARCHIVES=""
while read -r kind name file sha nparts; do
    [ "$kind" = archive ] && ARCHIVES="$ARCHIVES $name:$file:$sha"
done <"$MANIFEST"
for a in $ARCHIVES; do
    n=${a%%:*} rest=${a#*:}
    install_archive "$n" "${rest%%:*}" "${rest#*:}"
done
cleanup "$WORK"

if [ -d "$TARGET" ]; then
    PYTHONPATH="$TARGET${PYTHONPATH:+:$PYTHONPATH}" "$PY" - "$MANIFEST" <<'EOF'
import sys
from importlib import metadata
try:
    from packaging.specifiers import SpecifierSet
except ImportError:  # no packaging: nothing to check against
    sys.exit(0)
missing = set()
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) != 4 or f[0] != "need":
        continue
    _, name, spec, by = f
    try:
        have = metadata.version(name)
    except metadata.PackageNotFoundError:
        if name not in missing:
            print(f"gpu-kit: warning: {name} (needed by {by}) is not installed")
        missing.add(name)
        continue
    if spec != "-" and not SpecifierSet(spec).contains(have, prereleases=True):
        print(f"gpu-kit: warning: {name} {have} does not satisfy {spec} (needed by {by})")
EOF
fi

echo "gpu-kit: export PYTHONPATH=$TARGET"
if [ "$FAIL" -ne 0 ]; then exit 1; fi
if [ "$MISSING" -ne 0 ] && [ "${GPU_KIT_REQUIRE_ALL:-0}" = 1 ]; then exit 3; fi
exit 0
