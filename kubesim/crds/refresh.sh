#!/usr/bin/env bash
# Re-download the vendored CRDs from the upstream release tags and record their checksums.
# Usage: kubesim/crds/refresh.sh   (KUEUE_VERSION / KUBERAY_VERSION override the tags)
set -euo pipefail
cd "$(dirname "$0")"
KUEUE_VERSION=${KUEUE_VERSION:-v0.19.2}
KUBERAY_VERSION=${KUBERAY_VERSION:-v1.7.0}
kueue="https://raw.githubusercontent.com/kubernetes-sigs/kueue/${KUEUE_VERSION}/config/components/crd/bases"
kuberay="https://raw.githubusercontent.com/ray-project/kuberay/${KUBERAY_VERSION}/ray-operator/config/crd/bases"
for plural in admissionchecks clusterqueues cohorts localqueues multikueueclusters multikueueconfigs resourceflavors \
  workloadpriorityclasses workloads; do
  curl -fsSL "${kueue}/kueue.x-k8s.io_${plural}.yaml" -o "kueue.x-k8s.io_${plural}.yaml"
done
for plural in rayclusters rayjobs rayservices; do
  curl -fsSL "${kuberay}/ray.io_${plural}.yaml" -o "ray.io_${plural}.yaml"
done
sha256sum ./*.yaml | sed 's#  \./#  #' > SHA256SUMS
git diff --stat -- . || true
echo "Kueue ${KUEUE_VERSION}, KubeRay ${KUBERAY_VERSION}: review the diff, then update README.md's table."
