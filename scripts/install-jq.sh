#!/usr/bin/env bash
# jq 1.7.1 beside Debian bookworm's jq 1.6 (/usr/bin/jq): the operator guide's `jq` lines
# are run with both (tests/test_guide_jq.py). Debian's 1.7.1 packages (trixie) need glibc
# 2.38 and bookworm has 2.36, so this builds Debian's own 1.7.1 source (its
# jq_1.7.1.orig.tar.gz, pinned by its SHA-256) from the Debian mirror apt is set up with,
# against bookworm's libonig. About 1.5 minutes, once; a binary already there that
# says jq-1.7.1 is kept.
# Installed in $PP_JQ_DIR (default ~/.cache/polaris-pipeline/jq-1.7.1); the last line
# printed on stdout is the binary's path, which the tests read.
# Usage: bash scripts/install-jq.sh
set -euo pipefail

VERSION=1.7.1
SOURCE=jq_${VERSION}.orig.tar.gz
SHA256=fc75b1824aba7a954ef0886371d951c3bf4b6e0a921d1aefc553f309702d6ed1
PREFIX="${PP_JQ_DIR:-$HOME/.cache/polaris-pipeline/jq-$VERSION}"
JQ="$PREFIX/bin/jq"

if [ -x "$JQ" ] && [ "$("$JQ" --version 2>/dev/null)" = "jq-$VERSION" ]; then
    echo "$JQ"
    exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
# Debian's jq package (1.6 on bookworm) is the other version the tests run.
missing=()
command -v jq >/dev/null 2>&1 || missing+=(jq)
for tool in gcc make autoreconf libtoolize; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
pkg-config --exists oniguruma 2>/dev/null || missing+=(libonig-dev)
if [ ${#missing[@]} -gt 0 ]; then
    echo "missing for jq $VERSION: ${missing[*]}: installing with apt-get" >&2
    $SUDO apt-get update -q
    $SUDO apt-get install -y --no-install-recommends jq gcc make autoconf automake libtool \
        libonig-dev pkg-config >&2
fi

# The first Debian mirror apt uses, so no other host is reached.
mirror=""
for sources in /etc/apt/sources.list.d/*.sources /etc/apt/sources.list; do
    [ -f "$sources" ] || continue
    mirror=$(awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}
                  /^deb / && $2 !~ /security/ {print $2; exit}' "$sources")
    [ -n "$mirror" ] && break
done
if [ -z "$mirror" ]; then
    echo "no Debian mirror in /etc/apt: cannot fetch $SOURCE" >&2
    exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "jq $VERSION missing: building it from $SOURCE into $PREFIX" >&2
curl -sfSL --retry 3 -o "$work/$SOURCE" "${mirror%/}/pool/main/j/jq/$SOURCE"
echo "$SHA256  $work/$SOURCE" | sha256sum --check --status || {
    echo "SHA-256 mismatch for $SOURCE" >&2
    exit 1
}
mkdir "$work/src"
tar xzf "$work/$SOURCE" -C "$work/src" --strip-components=1
cd "$work/src"
# The source's scripts/version asks git for the version; this tarball has no .git.
printf '#!/bin/sh\necho %s\n' "$VERSION" > scripts/version
{
    autoreconf -i
    ./configure --prefix="$PREFIX" --disable-shared --disable-docs \
        --disable-maintainer-mode --with-oniguruma=yes
    make -j"$(nproc)"
    make install
} > "$work/build.log" 2>&1 || {
    tail -30 "$work/build.log" >&2
    exit 1
}
[ "$("$JQ" --version)" = "jq-$VERSION" ] || {
    echo "built $JQ but it says $("$JQ" --version)" >&2
    exit 1
}
echo "$JQ"
