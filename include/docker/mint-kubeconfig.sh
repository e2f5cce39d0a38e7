#!/usr/bin/env bash
# Write a kubeconfig the Airflow containers of docker-compose.yaml can use against a real cluster (AKS, EKS,
# GKE, kind, ...): a ServiceAccount token instead of the exec plugin (kubelogin, aws, gke-gcloud-auth-plugin)
# the host's kubeconfig calls, the CA embedded instead of a host path, and optionally a server address the
# containers can reach instead of a loopback one.
#
# Run it on the host, with a kubectl that can reach the cluster as you (it needs to create tokens for the
# ServiceAccount, which include/manifests/rbac/rbac.yaml creates and binds). docker compose gives every
# container the one kubeconfig, so the default is the account with the workers' rights (submit, deploy);
# a second file minted for kueue-ray-api-server would limit the UI to reads.
#
#   include/docker/mint-kubeconfig.sh airflow.kubeconfig
#   include/docker/mint-kubeconfig.sh --server https://host.docker.internal:41234 airflow.kubeconfig   # kind
#   printf 'KUBECONFIG_FILE=./airflow.kubeconfig\nAIRFLOW_UID=%s\n' "$(id -u)" >> .env
#
# Options:
#   --namespace NS          namespace of the ServiceAccount (default: airflow)
#   --service-account NAME  the ServiceAccount (default: kueue-ray-worker)
#   --duration D            token lifetime asked of the API server, which may cap it (default: 24h);
#                           mint again when it expires
#   --context CTX           the context of your kubeconfig to read the cluster from (default: current)
#   --server URL            the API server address the containers use; for https the original host
#                           becomes tls-server-name, so the server certificate still matches
#   --token-file FILE       use this token (e.g. one your platform team issued) instead of minting one
#   --renew-every D         keep running: mint again every D (sleep's syntax: 12h, 30m), well before the
#                           token expires; e.g. `nohup ... --renew-every 12h airflow.kubeconfig &`
#
# The file is written with mode 0600: the containers read it only when AIRFLOW_UID is your uid. An existing
# file is rewritten in place, so running containers (docker compose bind-mounts this one file, i.e. its
# inode) read the new token at once: the triggerer loads credentials again on its first 401.
set -euo pipefail

namespace=airflow
service_account=kueue-ray-worker
duration=24h
context=""
server_override=""
token_file=""
renew_every=""
output=""

usage() { sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//' >&2; exit 2; }

while [[ $# -gt 0 ]]; do
  case "$1" in
    --namespace) namespace="$2"; shift 2 ;;
    --service-account) service_account="$2"; shift 2 ;;
    --duration) duration="$2"; shift 2 ;;
    --context) context="$2"; shift 2 ;;
    --server) server_override="$2"; shift 2 ;;
    --token-file) token_file="$2"; shift 2 ;;
    --renew-every) renew_every="$2"; shift 2 ;;
    -h|--help) usage ;;
    -*) echo "unknown option $1" >&2; usage ;;
    *) [[ -z "$output" ]] || usage; output="$1"; shift ;;
  esac
done
[[ -n "$output" ]] || usage

source_kubectl=(kubectl)
[[ -z "$context" ]] || source_kubectl+=(--context "$context")

# The selected context's cluster only, with file references replaced by their data (--flatten).
field() { "${source_kubectl[@]}" config view --raw --minify --flatten -o "jsonpath={.clusters[0].$1}"; }
cluster_name="$(field name)"
server="$(field cluster.server)"
ca_data="$(field cluster.certificate-authority-data)"
insecure="$(field cluster.insecure-skip-tls-verify)"
tls_server_name="$(field cluster.tls-server-name)"
[[ -n "$server" ]] || { echo "no cluster in the current kubeconfig context" >&2; exit 1; }

if [[ -n "$server_override" ]]; then
  original_host="$(printf '%s' "$server" | sed -E 's#^[a-z]+://(\[[^]]*\]|[^:/]*).*#\1#' | tr -d '[]')"
  new_host="$(printf '%s' "$server_override" | sed -E 's#^[a-z]+://(\[[^]]*\]|[^:/]*).*#\1#' | tr -d '[]')"
  if [[ "$server_override" == https://* && -z "$tls_server_name" && "$original_host" != "$new_host" ]]; then
    tls_server_name="$original_host"
  fi
  server="$server_override"
fi

mint_once() {
if [[ -n "$token_file" ]]; then
  token="$(tr -d '[:space:]' < "$token_file")"
else
  token="$("${source_kubectl[@]}" create token "$service_account" --namespace "$namespace" --duration "$duration")"
fi
[[ -n "$token" ]] || { echo "no token" >&2; return 1; }

# YAML single-quoted scalars: only ' needs escaping (as '').
quote() { printf "'%s'" "${1//\'/\'\'}"; }

umask 077
tmp="$(mktemp "$(dirname "$output")/.$(basename "$output").XXXXXX")"
trap 'rm -f "$tmp"' EXIT
{
  echo "# ServiceAccount ${namespace}/${service_account} on ${cluster_name}, written by include/docker/mint-kubeconfig.sh"
  echo "apiVersion: v1"
  echo "kind: Config"
  echo "clusters:"
  echo "  - name: $(quote "$cluster_name")"
  echo "    cluster:"
  echo "      server: $(quote "$server")"
  [[ -z "$ca_data" ]] || echo "      certificate-authority-data: $(quote "$ca_data")"
  [[ "$insecure" != "true" ]] || echo "      insecure-skip-tls-verify: true"
  [[ -z "$tls_server_name" ]] || echo "      tls-server-name: $(quote "$tls_server_name")"
  echo "users:"
  echo "  - name: $(quote "$service_account")"
  echo "    user:"
  echo "      token: $(quote "$token")"
  echo "contexts:"
  echo "  - name: airflow"
  echo "    context:"
  echo "      cluster: $(quote "$cluster_name")"
  echo "      user: $(quote "$service_account")"
  echo "      namespace: ray"
  echo "current-context: airflow"
} > "$tmp"
kubectl config view --kubeconfig "$tmp" > /dev/null  # parses as a kubeconfig
if [[ -f "$output" ]]; then
  cat "$tmp" > "$output"  # in place: a bind mount of this file keeps seeing it
  rm -f "$tmp"
else
  mv "$tmp" "$output"
fi
trap - EXIT

echo "wrote $output (mode 0600, owner uid $(id -u)): ServiceAccount ${namespace}/${service_account}, server ${server}" >&2
echo "for docker compose, in .env: KUBECONFIG_FILE=$output and AIRFLOW_UID=$(id -u)" >&2
}

mint_once
while [[ -n "$renew_every" ]]; do
  sleep "$renew_every"
  # A failed renewal (cluster unreachable, your own login expired) keeps the old token and tries again.
  mint_once || echo "renewal failed at $(date -u +%FT%TZ); trying again in $renew_every" >&2
done
