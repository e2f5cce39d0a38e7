#!/usr/bin/env bash
# Re-download the vendored JSON schemas of the deployment files and record their checksums.
# Usage: tests/schemas/refresh.sh   (CHART_VERSION, CHART_REF and COMPOSE_SPEC_REF override the versions)
# The defaults reproduce the vendored files. CHART_REF is the apache/airflow commit (or tag) to read the chart
# from: the vendored schema is main's at 3e311d6 (chart/Chart.yaml there: version 1.22.0); the released chart
# is the tag, CHART_REF=helm-chart/1.22.0.
set -euo pipefail
cd "$(dirname "$0")"
CHART_VERSION=${CHART_VERSION:-1.22.0}
CHART_REF=${CHART_REF:-3e311d6de766d7a0b0e994de6769daa8b4d68e2f}
COMPOSE_SPEC_REF=${COMPOSE_SPEC_REF:-a08f8d51631b7127ddac3d2c65537db429d0f1d0}
curl -fsSL "https://raw.githubusercontent.com/apache/airflow/${CHART_REF}/chart/Chart.yaml" | grep -qx "version: ${CHART_VERSION}" \
  || { echo "apache/airflow ${CHART_REF}: chart/Chart.yaml is not version ${CHART_VERSION}" >&2; exit 1; }
curl -fsSL "https://raw.githubusercontent.com/apache/airflow/${CHART_REF}/chart/values.schema.json" \
  -o airflow-chart-values.schema.json
curl -fsSL "https://raw.githubusercontent.com/compose-spec/compose-spec/${COMPOSE_SPEC_REF}/schema/compose-spec.json" \
  -o compose-spec.json
sha256sum ./*.json | sed 's#  \./#  #' > SHA256SUMS
git diff --stat -- . || true
echo "Airflow chart ${CHART_VERSION} (${CHART_REF}), compose-spec ${COMPOSE_SPEC_REF}: review the diff, then update README.md's table"
echo "(and include/helm/values.yaml's --version when the chart version changed)."
