#!/usr/bin/env bash
# Regenerate this wrapper module's go.mod for another Kubernetes release:
#   e2e/build/k8s/gen-gomod.sh v1.35.4   (then update K8S_VERSION in ../versions.env)
# Kubernetes' go.mod requires its staging modules at v0.0.0 with replace
# directives into ./staging; here each one is replaced by its published tag
# v0.<minor>.<patch>, read from that release's own go.mod.
set -euo pipefail
version="${1:?usage: gen-gomod.sh vX.Y.Z}"
cd "$(dirname "${BASH_SOURCE[0]}")"
export GOTOOLCHAIN="${GOTOOLCHAIN:-local}"
upstream="$(go mod download -json "k8s.io/kubernetes@$version" \
    | python3 -c 'import json, sys; print(json.load(sys.stdin)["GoMod"])')"
staging_tag="v0.${version#v1.}"
go mod edit -require="k8s.io/kubernetes@$version"
for module in $(awk '$1 ~ /^k8s\.io\// && $2 == "v0.0.0" {print $1}' "$upstream"); do
    go mod edit -replace="$module=$module@$staging_tag"
done
go mod tidy
