#!/usr/bin/env bash
# Build, or reuse, the local cluster's binaries: etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kubectl, kwok, helm, prometheus,
# promtool, helm-unittest (the chart's template tests) and prometheus-adapter
# (custom.metrics.k8s.io for the autoscaling e2e).
#
# Each build unit is a wrapper module under e2e/build/<unit>/ (go.mod and
# go.sum committed); its binaries land in $SPECDEPLOY_CACHE/bin/<unit>-<version>/
# outside the repository, so a second run on the same machine takes seconds.
# A unit is rebuilt when its directory lacks the .complete stamp or the stamp
# no longer matches (go.mod, go.sum, Go version, RECIPE below). Prints one line
# per unit saying "built" or "reused", and the build minutes.
#
# Usage: e2e/build/build.sh [unit...]     (default: all units)
#        e2e/build/build.sh --print-dir UNIT
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
source "$here/versions.env"
cache="${SPECDEPLOY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/specdeploy}/bin"
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}" CGO_ENABLED=0 GOFLAGS=-buildvcs=false
units=(etcd k8s kwok helm prometheus helm-unittest prometheus-adapter)
# Bump when a change to this script changes what the binaries are.
RECIPE=1

version_of() {
    case "$1" in
        etcd) echo "$ETCD_VERSION" ;;
        k8s) echo "$K8S_VERSION" ;;
        kwok) echo "$KWOK_VERSION" ;;
        helm) echo "$HELM_VERSION" ;;
        prometheus) echo "$PROMETHEUS_VERSION" ;;
        helm-unittest) echo "$HELM_UNITTEST_VERSION" ;;
        prometheus-adapter) echo "$PROMETHEUS_ADAPTER_VERSION" ;;
        *) echo "unknown unit $1" >&2; return 1 ;;
    esac
}

module_of() {
    case "$1" in
        etcd) echo go.etcd.io/etcd/server/v3 ;;
        k8s) echo k8s.io/kubernetes ;;
        kwok) echo sigs.k8s.io/kwok ;;
        helm) echo helm.sh/helm/v3 ;;
        prometheus) echo github.com/prometheus/prometheus ;;
        helm-unittest) echo github.com/helm-unittest/helm-unittest ;;
        prometheus-adapter) echo sigs.k8s.io/prometheus-adapter ;;
    esac
}

# The version a unit's go.mod requires. Prometheus tags release 3.X.Y as Go
# module v0.3XX.Y (3.16.0 is v0.316.0); versions.env keeps the release name.
module_version_of() {
    local v
    v="$(version_of "$1")"
    if [[ "$1" == prometheus ]]; then
        local major minor patch
        IFS=. read -r major minor patch <<<"${v#v}"
        echo "v0.$((major * 100 + minor)).$patch"
    else
        echo "$v"
    fi
}

# Build tags. Prometheus: drop every service-discovery plugin but Kubernetes'
# (the cloud SDKs double the source to download); without `builtinassets` the
# React UI is not embedded, so UI pages answer 500 while the API works.
tags_of() {
    case "$1" in
        prometheus) echo remove_all_sd,enable_kubernetes_sd ;;
        *) echo "" ;;
    esac
}

unit_dir() { echo "$cache/$1-$(version_of "$1")"; }

# The stamp changes whenever anything that shapes the binaries changes.
stamp_of() {
    # A tags line only where a unit has tags, so the older units' stamps stay as they were.
    { go version; echo "recipe $RECIPE"; cat "$here/$1/go.mod" "$here/$1/go.sum"
      if [[ -n "$(tags_of "$1")" ]]; then echo "tags $(tags_of "$1")"; fi; } \
        | sha256sum | cut -c1-16
}

ldflags_of() {
    local v="$2" date
    date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    case "$1" in
        k8s)
            local major minor flags=""
            major="$(echo "${v#v}" | cut -d. -f1)" minor="$(echo "$v" | cut -d. -f2)"
            # Unstamped, servers report v0.0.0-master and Helm's
            # .Capabilities.KubeVersion breaks.
            for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
                flags+=" -X $pkg.gitVersion=$v -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
                flags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$date"
            done
            echo "$flags" ;;
        etcd) echo "-X go.etcd.io/etcd/api/v3/version.GitSHA=$v" ;;
        helm)
            # Helm's own Makefile derives its default KubeVersion from client-go.
            local cg
            cg="$(cd "$here/helm" && go list -m -f '{{.Version}}' k8s.io/client-go)"
            echo "-X helm.sh/helm/v3/internal/version.version=$v" \
                "-X helm.sh/helm/v3/internal/version.gitTreeState=clean" \
                "-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1" \
                "-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$(echo "$cg" | cut -d. -f2)" ;;
        kwok) echo "" ;;  # kwok's version is a constant in its source
        helm-unittest) echo "" ;;
        prometheus-adapter) echo "" ;;
        prometheus)
            # What promu stamps; `prometheus --version` and build_info show it.
            local pkg=github.com/prometheus/common/version
            echo "-X $pkg.Version=${v#v} -X $pkg.Revision=$(module_version_of prometheus)" \
                "-X $pkg.Branch=HEAD -X $pkg.BuildUser=specdeploy -X $pkg.BuildDate=$date" ;;
    esac
}

check_pin() {
    local pinned
    pinned="$(cd "$here/$1" && go list -m -f '{{.Version}}' "$(module_of "$1")")"
    if [[ "$pinned" != "$(module_version_of "$1")" ]]; then
        echo "build: $1/go.mod pins $pinned but versions.env says $(version_of "$1")" \
            "(module $(module_version_of "$1"))" >&2
        exit 1
    fi
}

build_unit() {
    local unit="$1" dir stamp tools tmp start
    dir="$(unit_dir "$unit")"
    stamp="$(stamp_of "$unit")"
    if [[ -f "$dir/.complete" && "$(cat "$dir/.complete")" == "$stamp" ]]; then
        echo "build: $unit $(version_of "$unit") reused from $dir"
        return
    fi
    check_pin "$unit"
    start="$(date +%s)"
    tmp="$dir.tmp.$$"
    rm -rf "$tmp" && mkdir -p "$tmp"
    # The units' tool directives name the packages to build.
    mapfile -t tools < <(cd "$here/$unit" && go mod edit -json | python3 -c \
        'import json, sys; print(*(t["Path"] for t in json.load(sys.stdin)["Tool"]), sep="\n")')
    (cd "$here/$unit" && nice go build -trimpath -tags "$(tags_of "$unit")" \
        -ldflags "-s -w $(ldflags_of "$unit" "$(version_of "$unit")")" -o "$tmp/" "${tools[@]}")
    # go build names etcd's server package (go.etcd.io/etcd/server/v3) "server".
    if [[ "$unit" == etcd ]]; then mv "$tmp/server" "$tmp/etcd"; fi
    echo "$stamp" >"$tmp/.complete"
    rm -rf "$dir" && mv "$tmp" "$dir"
    echo "build: $unit $(version_of "$unit") built in $(( ($(date +%s) - start) / 60 )) min" \
        "($(( $(date +%s) - start )) s) into $dir: $(cd "$dir" && du -sh -- * | tr '\t\n' ': ')"
}

if [[ "${1:-}" == "--print-dir" ]]; then
    unit_dir "$2"
    exit 0
fi
command -v go >/dev/null || { echo "build: Go >= 1.26 is required (go.dev/dl)" >&2; exit 1; }
# The cluster's PKI is made with openssl (specdeploy/localcluster/pki.py).
if ! command -v openssl >/dev/null; then
    echo "build: installing openssl" >&2
    apt-get update -qq && apt-get install -y -qq openssl
fi
for unit in "${@:-${units[@]}}"; do
    build_unit "$unit"
done
