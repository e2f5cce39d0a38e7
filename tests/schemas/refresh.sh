#!/usr/bin/env bash
# Re-download the vendored JSON schemas of the deployment files and record their checksums.
# Usage: tests/schemas/refresh.sh   (CHART_VERSION / COMPOSE_SPEC_REF override the versions)
set -euo pipefail
cd "$(dirname "$0")"
CHART_VERSION=${CHART_VERSION:-1.22.0}
COMPOSE_SPEC_REF=${COMPOSE_SPEC_REF:-a08f8d51631b7127ddac3d2c65537db429d0f1d0}
curl -fsSL "https://raw.githubusercontent.com/apache/airflow/helm-chart/${CHART_VERSION}/chart/values.schema.json" \
  -o airflow-chart-values.schema.json
curl -fsSL "https://raw.githubusercontent.com/compose-spec/compose-spec/${COMPOSE_SPEC_REF}/schema/compose-spec.json" \
  -o compose-spec.json
sha256sum ./*.json | sed 's#  \./#  #' > SHA256SUMS
git diff --stat -- . || true
echo "Airflow chart ${CHART_VERSION}, compose-spec ${COMPOSE_SPEC_REF}: review the diff, then update README.md's table"
echo "(and include/helm/values.yaml's --version when the chart version changed)."
