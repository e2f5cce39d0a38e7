#!/bin/sh
# Builds the upstream programs pinned by go.mod/go.sum into a cache outside the checkout, one folder per
# go.sum, so CI's fresh export of the repository reuses binaries built by an earlier run on the machine.
# Prints the folder holding the binaries. Go's module and build caches ($GOMODCACHE, $GOCACHE) are reused.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
key=$(cat "$here/build.sh" "$here/go.mod" "$here/go.sum" "$here/kuberay/go.mod" "$here/kuberay/go.sum" | sha1sum | cut -c1-12)
out=${REALCLUSTER_CACHE:-$HOME/.cache/airflow-kueue-ray/realcluster}/$key
if [ -f "$out/.complete" ]; then echo "$out"; exit 0; fi
# REALCLUSTER_DRY=1: only say where the binaries would be, failing when they are not built
if [ -n "${REALCLUSTER_DRY:-}" ]; then echo "$out"; echo "not built: $out" >&2; exit 1; fi
mkdir -p "$out"
# Version stamps `make` would give the releases: Kueue refuses an API server whose /version does not parse.
k8s_version=v1.36.2
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$k8s_version -X k8s.io/component-base/version.gitMajor=1
 -X k8s.io/component-base/version.gitMinor=36 -X k8s.io/component-base/version.gitTreeState=clean
 -X k8s.io/component-base/version.buildDate=1970-01-01T00:00:00Z
 -X sigs.k8s.io/kueue/pkg/version.GitVersion=v0.19.2"
cd "$here"
# dir:name=package; built one after another so a failure names its program. KubeRay's operator has a
# module of its own (kuberay/go.mod): its controller-runtime differs from Kueue's.
for spec in \
    .:etcd=go.etcd.io/etcd/server/v3 \
    .:kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver \
    .:kube-controller-manager=k8s.io/kubernetes/cmd/kube-controller-manager \
    .:kueue=sigs.k8s.io/kueue/cmd/kueue \
    kuberay:kuberay-operator=github.com/ray-project/kuberay/ray-operator; do
  dir=${spec%%:*}; spec=${spec#*:}; name=${spec%%=*}; pkg=${spec#*=}
  [ -x "$out/$name" ] && continue  # built by an earlier, interrupted run for this same go.sum
  start=$(date +%s)
  (cd "$here/$dir" && "$GO" build -mod=readonly -ldflags="$ldflags" -o "$out/$name.tmp" "$pkg") >&2
  mv "$out/$name.tmp" "$out/$name"
  echo "built $name in $(( $(date +%s) - start ))s" >&2
done
touch "$out/.complete"
echo "$out"
