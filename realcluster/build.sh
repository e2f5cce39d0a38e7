#!/bin/sh
# Builds the upstream programs pinned by go.mod/go.sum into a cache outside the checkout, one folder per
# go.sum, so CI's fresh export of the repository reuses binaries built by an earlier run on the machine.
# Prints the folder holding the binaries. Go's module and build caches ($GOMODCACHE, $GOCACHE) are reused.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
GO=${GO:-$(command -v go || echo /usr/local/go/bin/go)}
key=$(cat "$here/go.mod" "$here/go.sum" | sha1sum | cut -c1-12)
out=${REALCLUSTER_CACHE:-$HOME/.cache/airflow-kueue-ray/realcluster}/$key
if [ -f "$out/.complete" ]; then echo "$out"; exit 0; fi
# REALCLUSTER_DRY=1: only say where the binaries would be, failing when they are not built
if [ -n "${REALCLUSTER_DRY:-}" ]; then echo "$out"; echo "not built: $out" >&2; exit 1; fi
mkdir -p "$out"
cd "$here"
# name=package; built one after another so a failure names its program
for spec in \
    etcd=go.etcd.io/etcd/server/v3 \
    kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver \
    kube-controller-manager=k8s.io/kubernetes/cmd/kube-controller-manager \
    kueue=sigs.k8s.io/kueue/cmd/kueue \
    kuberay-operator=github.com/ray-project/kuberay/ray-operator; do
  name=${spec%%=*}; pkg=${spec#*=}
  start=$(date +%s)
  "$GO" build -mod=readonly -ldflags='-s -w' -o "$out/$name.tmp" "$pkg" >&2
  mv "$out/$name.tmp" "$out/$name"
  echo "built $name in $(( $(date +%s) - start ))s" >&2
done
touch "$out/.complete"
echo "$out"
