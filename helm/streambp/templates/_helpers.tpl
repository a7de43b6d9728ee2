{{/* The chart name, shortened for label values. */}}
{{- define "streambp.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Object name prefix: the release name, plus the chart name unless it already holds it. */}}
{{- define "streambp.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 50 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 50 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "streambp.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "streambp.selectorLabels" -}}
app.kubernetes.io/name: {{ include "streambp.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "streambp.labels" -}}
helm.sh/chart: {{ include "streambp.chart" . }}
{{ include "streambp.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "streambp.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{- define "streambp.coordinatorName" -}}
{{- printf "%s-coordinator" (include "streambp.fullname" .) }}
{{- end }}

{{- define "streambp.workerName" -}}
{{- printf "%s-worker" (include "streambp.fullname" .) }}
{{- end }}

{{/* host:port of the coordinator's gRPC Service, as workers and clients in the cluster dial it. */}}
{{- define "streambp.coordinatorAddress" -}}
{{- printf "%s:%d" (include "streambp.coordinatorName" .) (int .Values.coordinator.grpcPort) }}
{{- end }}

{{/*
Auth. The users file (--users) is the Secret streambp.usersSecret: rendered
from auth.users (templates/secret.yaml) or auth.existingUsersSecret. Plain
tokens the chart generates live in <fullname>-tokens. auth.existingSecret is
the single-token shorthand: --client-token-file and --worker-token-file.
*/}}
{{- define "streambp.authShorthand" -}}
{{- if .Values.auth.existingSecret }}true{{ end }}
{{- end }}

{{- define "streambp.generatedTokenSecret" -}}
{{- printf "%s-tokens" (include "streambp.fullname" .) }}
{{- end }}

{{/* The users Secret; empty in the shorthand. */}}
{{- define "streambp.usersSecret" -}}
{{- if not .Values.auth.existingSecret }}
{{- default (printf "%s-users" (include "streambp.fullname" .)) .Values.auth.existingUsersSecret }}
{{- end }}
{{- end }}

{{/* "true" when the chart renders the users file from auth.users. */}}
{{- define "streambp.rendersUsers" -}}
{{- if not (or .Values.auth.existingSecret .Values.auth.existingUsersSecret) }}true{{ end }}
{{- end }}

{{/* The admin the chart adds to the users file it renders, with a generated token; empty: none. */}}
{{- define "streambp.adminName" -}}
{{- if include "streambp.rendersUsers" . }}{{ .Values.auth.admin.name }}{{ end }}
{{- end }}

{{/* The Secret with the workers' plain token (key auth.workerTokenKey). */}}
{{- define "streambp.workerTokenSecret" -}}
{{- coalesce .Values.auth.existingSecret .Values.auth.existingWorkerTokenSecret (include "streambp.generatedTokenSecret" .) }}
{{- end }}

{{/* The Secret with a client token (key auth.clientTokenKey) for `helm test` and NOTES; empty: none. */}}
{{- define "streambp.clientTokenSecret" -}}
{{- if .Values.auth.existingSecret }}
{{- .Values.auth.existingSecret }}
{{- else if include "streambp.adminName" . }}
{{- include "streambp.generatedTokenSecret" . }}
{{- end }}
{{- end }}

{{/*
TLS: served with tls.enabled (a Secret of the operator's) or with a
certificate cert-manager issues (tls.certManager.enabled: true, or auto when
the cluster serves cert-manager.io/v1 and tls.enabled is false).
*/}}
{{- define "streambp.certManager" -}}
{{- $on := toString .Values.tls.certManager.enabled }}
{{- if eq $on "true" }}true
{{- else if and (eq $on "auto") (not .Values.tls.enabled) (.Capabilities.APIVersions.Has "cert-manager.io/v1") }}true
{{- end }}
{{- end }}

{{- define "streambp.tls" -}}
{{- if or .Values.tls.enabled (include "streambp.certManager" .) }}true{{ end }}
{{- end }}

{{/* The Secret with tls.crt, tls.key and ca.crt. */}}
{{- define "streambp.tlsSecret" -}}
{{- if .Values.tls.enabled }}
{{- required "tls.secretName: the Secret with tls.crt, tls.key and ca.crt" .Values.tls.secretName }}
{{- else }}
{{- printf "%s-coordinator-tls" (include "streambp.fullname" .) }}
{{- end }}
{{- end }}

{{/* Combinations of values the chart refuses, with the reason. Renders nothing. */}}
{{- define "streambp.validate" -}}
{{- $auth := .Values.auth }}
{{- if $auth.existingSecret }}
{{- $others := list }}
{{- if $auth.users }}{{ $others = append $others "auth.users" }}{{ end }}
{{- range $key := list "existingUsersSecret" "workerToken" "existingWorkerTokenSecret" }}
{{- if get $auth $key }}{{ $others = append $others (printf "auth.%s" $key) }}{{ end }}
{{- end }}
{{- if $others }}
{{- fail (printf "auth.existingSecret is the single-token shorthand (one client token, one worker token, no users file) and cannot be combined with %s: drop auth.existingSecret to use a users file" (join ", " $others)) }}
{{- end }}
{{- else }}
{{- if and $auth.users $auth.existingUsersSecret }}
{{- fail "auth.users and auth.existingUsersSecret: set one (the users file inline, or the Secret that holds it)" }}
{{- end }}
{{- if and $auth.workerToken $auth.existingWorkerTokenSecret }}
{{- fail "auth.workerToken and auth.existingWorkerTokenSecret: set one (the workers' token, or the Secret that holds it)" }}
{{- end }}
{{- if and $auth.existingUsersSecret (not (or $auth.workerToken $auth.existingWorkerTokenSecret)) }}
{{- fail "auth.existingUsersSecret: the chart adds nothing to a users file it does not render; give the workers' token with auth.existingWorkerTokenSecret (or auth.workerToken) and list its SHA-256 under workers: in the file" }}
{{- end }}
{{- end }}
{{- $certManager := toString .Values.tls.certManager.enabled }}
{{- if and (eq $certManager "true") .Values.tls.enabled }}
{{- fail "tls.enabled (a Secret of your own, tls.secretName) and tls.certManager.enabled=true (a certificate cert-manager issues) exclude each other: set one" }}
{{- end }}
{{- if and (eq $certManager "true") (not (.Capabilities.APIVersions.Has "cert-manager.io/v1")) }}
{{- fail "tls.certManager.enabled=true, but the cluster serves no cert-manager.io/v1: install cert-manager, or set tls.certManager.enabled=auto (TLS wherever cert-manager is present)" }}
{{- end }}
{{- end }}

{{- define "streambp.sharedClaim" -}}
{{- default (printf "%s-shared" (include "streambp.fullname" .)) .Values.shared.existingClaim }}
{{- end }}

{{/*
The worker's --memory: worker.memory when set; for CPU workers otherwise the
container's memory limit, a Kubernetes quantity turned into the sbp form
(64Gi -> 64GiB, 500M -> 500MB, 1073741824 -> 1073741824).
*/}}
{{- /* The worker's --memory: worker.memory, or for cpu workers the container's
memory limit; Kubernetes quantities (72Gi, 64G) and our sizes (72GiB) alike. */}}
{{- define "streambp.workerMemory" -}}
{{- $field := "worker.memory" }}
{{- $size := toString (default "" .Values.worker.memory) }}
{{- if not $size }}
{{- if eq .Values.worker.device "cuda" }}
{{- fail "worker.memory: set the GPU memory budget of each worker (e.g. 72Gi) when worker.device is cuda" }}
{{- end }}
{{- $field = "worker.resources.limits.memory" }}
{{- $size = toString (dig "limits" "memory" "" (default dict .Values.worker.resources)) }}
{{- end }}
{{- if regexMatch "^[0-9]+(\\.[0-9]+)?[KMGT]i$" $size }}
{{- printf "%sB" $size }}
{{- else if regexMatch "^[0-9]+(\\.[0-9]+)?[kMGT]$" $size }}
{{- printf "%sB" (upper $size) }}
{{- else if regexMatch "^[0-9]+(\\.[0-9]+)? ?([KMGT]i?B|kB|B)?$" $size }}
{{- $size }}
{{- else }}
{{- fail (printf "%s: %q is not a size like 72Gi, 64G or 72GiB (worker.memory empty: derived from worker.resources.limits.memory for cpu workers)" $field $size) }}
{{- end }}
{{- end }}

{{- /* A size for an sbp flag: Kubernetes quantities (256Gi, 500G) and our
sizes (256GiB) alike; fails naming .field. Called with (dict "field" F "size" S). */}}
{{- define "streambp.sizeArg" -}}
{{- $size := toString .size }}
{{- if regexMatch "^[0-9]+(\\.[0-9]+)?[KMGT]i$" $size }}
{{- printf "%sB" $size }}
{{- else if regexMatch "^[0-9]+(\\.[0-9]+)?[kMGT]$" $size }}
{{- printf "%sB" (upper $size) }}
{{- else if regexMatch "^[0-9]+(\\.[0-9]+)? ?([KMGT]i?B|kB|B)?$" $size }}
{{- $size }}
{{- else }}
{{- fail (printf "%s: %q is not a size like 256Gi, 500G or 256GiB" .field $size) }}
{{- end }}
{{- end }}

{{- define "streambp.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: {{ .Values.securityContext.runAsUser }}
runAsGroup: {{ .Values.securityContext.runAsUser }}
fsGroup: {{ .Values.securityContext.runAsUser }}
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{- define "streambp.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end }}
