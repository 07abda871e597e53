#!/usr/bin/env bash
# Build Kubernetes 1.20.2 (kube-apiserver, kube-controller-manager, and for a real node
# kube-scheduler, kubelet, kube-proxy) from Debian's source package, so tests run against
# a real API server and node on a machine that has no Docker and no cluster.  etcd comes from Debian's
# etcd-server package.
#
# Idempotent: exits at once when the cached binaries match the recipe stamp.
#
# Cache layout ("${TFJOB_CACHE:-$HOME/.cache/tfjob-operator}/kubernetes-v1.20.2"):
#   bin/       kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy, .stamp
#   gocache/   Go build cache (~1.4 GB): a rebuild after a recipe change takes ~10 s, not ~4 min
#   debsrc/    the downloaded Debian source package (34 MB), so a rebuild needs no download
#   generated/ zz_generated.openapi.go (depends only on the source; skips openapi-gen)
#   logs/      one log per step
# The unpacked source tree (~300 MB) lives in work/ during a build and is removed
# after a successful one: unpacking it again takes seconds.
#
# Usage: build-control-plane.sh [--force]
set -euo pipefail

K8S_VERSION=v1.20.2
COMMANDS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy)
DEB_SRC_VERSION=1.20.5+really1.20.2-1.1+deb12u1
# Bump when the build recipe changes, so cached binaries are rebuilt.
RECIPE=2
STAMP_TEXT="kubernetes=${DEB_SRC_VERSION} k8s=${K8S_VERSION} recipe=${RECIPE}"

CACHE="${TFJOB_CACHE:-$HOME/.cache/tfjob-operator}"
ROOT="$CACHE/kubernetes-${K8S_VERSION}"
BIN="$ROOT/bin"
STAMP="$BIN/.stamp"
LOGS="$ROOT/logs"
WORK="$ROOT/work"
DEBSRC="$ROOT/debsrc"
GENERATED="$ROOT/generated"
OPENAPI_CACHED="$GENERATED/zz_generated.openapi.go"
OPENAPI_STAMP="$GENERATED/.stamp"

GO=/usr/lib/go-1.19/bin/go
ETCD=/usr/bin/etcd
REFLECT2_SRC=/usr/share/gocode/src/github.com/modern-go/reflect2
SOURCES_FILE=/etc/apt/sources.list.d/tfjob-deb-src.sources
SOURCES_LIST_FILE=/etc/apt/sources.list.d/tfjob-deb-src.list

FORCE=0
for arg in "$@"; do
    case "$arg" in
        --force) FORCE=1 ;;
        -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
        *) echo "unknown argument: $arg" >&2; exit 2 ;;
    esac
done

log() { echo "[build-control-plane] $*"; }
die() { echo "[build-control-plane] ERROR: $*" >&2; exit 1; }

# Run a step with its output in a log file; on failure show the log's tail.
run_logged() {
    local logfile="$1"; shift
    if ! "$@" >"$logfile" 2>&1; then
        echo "[build-control-plane] FAILED: $*" >&2
        echo "---- last 40 lines of $logfile ----" >&2
        tail -n 40 "$logfile" >&2
        exit 1
    fi
}

binaries_ok() {
    [[ $FORCE == 0 && -x "$ETCD" && -f "$STAMP" && "$(cat "$STAMP")" == "$STAMP_TEXT" ]] || return 1
    local b
    for b in "${COMMANDS[@]}"; do [[ -x "$BIN/$b" ]] || return 1; done
}

# Fast path, without taking the lock.
if binaries_ok; then
    log "cached: $BIN ($STAMP_TEXT)"
    exit 0
fi

mkdir -p "$ROOT" "$LOGS"
# Serialize concurrent builds (e.g. parallel test workers); re-check once we hold the lock.
exec 9>"$ROOT/.lock"
flock 9
if binaries_ok; then
    log "cached (built by a concurrent run): $BIN"
    exit 0
fi

as_root() {
    if [[ $(id -u) == 0 ]]; then "$@"; else sudo "$@"; fi
}


# 1. A deb-src entry (same URIs/Suites/Components/Signed-By as the binary entries),
#    needed only until the source package has been downloaded once.
DSC="$DEBSRC/kubernetes_${DEB_SRC_VERSION}.dsc"
NEED_UPDATE=0
if [[ ! -f "$DSC" ]] \
    && ! apt-cache showsrc kubernetes 2>/dev/null | grep -qx "Version: ${DEB_SRC_VERSION}"; then
    if [[ -f /etc/apt/sources.list.d/debian.sources ]]; then
        if [[ ! -f "$SOURCES_FILE" ]]; then
            log "adding deb-src entries: $SOURCES_FILE"
            sed -E 's/^Types:.*/Types: deb-src/' /etc/apt/sources.list.d/debian.sources \
                | as_root tee "$SOURCES_FILE" >/dev/null
        fi
    elif [[ -f /etc/apt/sources.list ]]; then
        if [[ ! -f "$SOURCES_LIST_FILE" ]]; then
            log "adding deb-src entries: $SOURCES_LIST_FILE"
            grep -E '^deb ' /etc/apt/sources.list | sed -E 's/^deb /deb-src /' \
                | as_root tee "$SOURCES_LIST_FILE" >/dev/null
        fi
    else
        die "no Debian apt sources found to derive deb-src entries from"
    fi
    NEED_UPDATE=1
fi

# 2. Debian packages: only touch apt when something is missing.
missing=()
[[ -x "$GO" ]] || missing+=(golang-1.19-go)
[[ -x "$ETCD" ]] || missing+=(etcd-server)
[[ -d "$REFLECT2_SRC" ]] || missing+=(golang-github-modern-go-reflect2-dev)
command -v openssl >/dev/null || missing+=(openssl)
command -v dpkg-source >/dev/null || missing+=(dpkg-dev)
if ((${#missing[@]})) || [[ $NEED_UPDATE == 1 ]]; then
    log "apt-get update (log: $LOGS/apt-update.log)"
    run_logged "$LOGS/apt-update.log" as_root apt-get update
fi
if ((${#missing[@]})); then
    log "apt-get install ${missing[*]} (log: $LOGS/apt-install.log)"
    run_logged "$LOGS/apt-install.log" as_root env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y --no-install-recommends "${missing[@]}"
fi
"$GO" version | grep -q 'go1\.19' || die "$GO is not Go 1.19"

# The source package: Kubernetes 1.20.2 with vendor/.
if [[ ! -f "$DSC" ]]; then
    log "downloading source package kubernetes=${DEB_SRC_VERSION} (log: $LOGS/apt-source.log)"
    rm -rf "$DEBSRC.tmp" && mkdir -p "$DEBSRC.tmp"
    (cd "$DEBSRC.tmp" && run_logged "$LOGS/apt-source.log" \
        apt-get source --download-only "kubernetes=${DEB_SRC_VERSION}")
    rm -rf "$DEBSRC" && mv "$DEBSRC.tmp" "$DEBSRC"
fi

# 3. Unpack and apply debian/patches/series (dpkg-source does the latter).
START=$(date +%s)
log "unpacking source into $WORK (log: $LOGS/unpack.log)"
rm -rf "$WORK"
mkdir -p "$WORK"
SRC="$WORK/kubernetes"
run_logged "$LOGS/unpack.log" dpkg-source -x --no-check "$DSC" "$SRC"
[[ -f "$SRC/.pc/applied-patches" ]] || die "debian patches were not applied"
log "applied patches: $(tr '\n' ' ' <"$SRC/.pc/applied-patches")"

# 4. reflect2 1.0.1 crashes in map iteration with Go >= 1.18: use Debian's 1.0.2.
log "replacing vendored reflect2 with $REFLECT2_SRC"
R2="$SRC/vendor/github.com/modern-go/reflect2"
rm -f "$R2"/*.go "$R2"/*.s
find "$REFLECT2_SRC" -maxdepth 1 -type f \( -name '*.go' -o -name '*.s' \) ! -name '*_test.go' \
    -exec cp {} "$R2/" \;

# 5. Go 1.19 in GOPATH mode (module mode with -mod=vendor fails for this tree).
export GOPATH="$WORK/gopath"
mkdir -p "$GOPATH/src/k8s.io"
ln -s "$SRC" "$GOPATH/src/k8s.io/kubernetes"
export GO111MODULE=off CGO_ENABLED=0 GOFLAGS="" GOPROXY=off
export GOCACHE="$ROOT/gocache"
PATH="${GO%/*}:$PATH"
export PATH
PKG=k8s.io/kubernetes
cd "$GOPATH/src/$PKG"

# 6. pkg/generated/openapi/zz_generated.openapi.go is not in the tarball: generate it
#    as build/root/Makefile.generated_files does (KUBE target), or reuse the cached one.
OPENAPI_OUT="$SRC/pkg/generated/openapi/zz_generated.openapi.go"
if [[ -f "$OPENAPI_CACHED" && -f "$OPENAPI_STAMP" && "$(cat "$OPENAPI_STAMP")" == "$DEB_SRC_VERSION" ]]; then
    log "using cached $OPENAPI_CACHED"
    cp "$OPENAPI_CACHED" "$OPENAPI_OUT"
else
    log "building openapi-gen (log: $LOGS/openapi-gen-build.log)"
    run_logged "$LOGS/openapi-gen-build.log" \
        go build -o "$WORK/openapi-gen" "$PKG/vendor/k8s.io/kube-openapi/cmd/openapi-gen"
    # Go files outside third-party vendor/ that carry a column-0 +k8s: tag and an
    # openapi-gen tag; staging/src/* is named vendor/* as in the Makefile.
    openapi_dirs=$(
        set +o pipefail  # grep exits 1 for xargs batches without a match
        find -H . \( -path './_*' -o -path './.*' -o -path ./vendor \) -prune \
            -o -type f -name '*.go' -print0 \
            | xargs -0 grep -l --null '^// *+k8s:' \
            | xargs -0 grep -l '+k8s:openapi-gen=' \
            | sed -e 's|/[^/]*$||' -e 's|^\./||' -e 's|^staging/src|vendor|' \
            | grep -v -E '^vendor/k8s\.io/(code-generator|sample-apiserver)/' \
            | LC_ALL=C sort -u)
    [[ -n $openapi_dirs ]] || die "found no packages with +k8s:openapi-gen tags"
    inputs=$(echo "$openapi_dirs" | sed "s|^|$PKG/|" | paste -sd, -)
    log "generating zz_generated.openapi.go from $(echo "$openapi_dirs" | wc -l) packages (log: $LOGS/openapi-gen.log)"
    run_logged "$LOGS/openapi-gen.log" "$WORK/openapi-gen" \
        --logtostderr \
        -i "$inputs" \
        -o "$GOPATH/src" \
        -p "$PKG/pkg/generated/openapi" \
        -O zz_generated.openapi \
        -h vendor/k8s.io/code-generator/hack/boilerplate.go.txt \
        -r "$WORK/KUBE_violations.report"
    [[ -s "$OPENAPI_OUT" ]] || die "openapi-gen produced no $OPENAPI_OUT"
    if ! diff -q "$WORK/KUBE_violations.report" api/api-rules/violation_exceptions.list >/dev/null; then
        log "note: API rule report differs from api/api-rules/violation_exceptions.list (harmless here)"
    fi
    mkdir -p "$GENERATED"
    cp "$OPENAPI_OUT" "$OPENAPI_CACHED.tmp" && mv "$OPENAPI_CACHED.tmp" "$OPENAPI_CACHED"
    echo "$DEB_SRC_VERSION" >"$OPENAPI_STAMP"
fi

# 7. Build.  Version vars live under the vendor/ import path in GOPATH mode.
BUILD_DATE=$(date -u -d "@$(dpkg-parsechangelog -l debian/changelog -S Timestamp)" +%Y-%m-%dT%H:%M:%SZ)
ldflags="-s -w"
for v in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $PKG/vendor/$v.gitVersion=${K8S_VERSION}"
    ldflags+=" -X $PKG/vendor/$v.gitMajor=1"
    ldflags+=" -X $PKG/vendor/$v.gitMinor=20"
    ldflags+=" -X $PKG/vendor/$v.gitTreeState=clean"
    ldflags+=" -X $PKG/vendor/$v.buildDate=${BUILD_DATE}"
done
log "go build ${COMMANDS[*]} ($(nproc) cores; log: $LOGS/go-build.log)"
BUILD_START=$(date +%s)
rm -rf "$BIN.tmp" && mkdir -p "$BIN.tmp"
run_logged "$LOGS/go-build.log" go build -v -trimpath -tags "selinux notest" -ldflags "$ldflags" \
    -o "$BIN.tmp/" "${COMMANDS[@]/#/$PKG/cmd/}"
log "go build took $(($(date +%s) - BUILD_START)) s"

for b in "${COMMANDS[@]}"; do
    "$BIN.tmp/$b" --version | grep -q "Kubernetes ${K8S_VERSION}" \
        || die "$b --version does not report ${K8S_VERSION}"
done
echo "$STAMP_TEXT" >"$BIN.tmp/.stamp"
rm -rf "$BIN" && mv "$BIN.tmp" "$BIN"

cd "$ROOT"
rm -rf "$WORK"
log "done in $(($(date +%s) - START)) s: $BIN/{${COMMANDS[*]}}, etcd: $ETCD"
