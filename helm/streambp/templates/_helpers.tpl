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

{{- define "streambp.tokenSecret" -}}
{{- default (printf "%s-tokens" (include "streambp.fullname" .)) .Values.auth.existingSecret }}
{{- end }}

{{- define "streambp.sharedClaim" -}}
{{- default (printf "%s-shared" (include "streambp.fullname" .)) .Values.shared.existingClaim }}
{{- end }}

{{/*
The worker's --memory: worker.memory when set; for CPU workers otherwise the
container's memory limit, a Kubernetes quantity turned into the sbp form
(64Gi -> 64GiB, 500M -> 500MB, 1073741824 -> 1073741824).
*/}}
{{- define "streambp.workerMemory" -}}
{{- if .Values.worker.memory }}
{{- .Values.worker.memory }}
{{- else if eq .Values.worker.device "cuda" }}
{{- fail "worker.memory: set the GPU memory budget of each worker (e.g. 72GiB) when worker.device is cuda" }}
{{- else }}
{{- $limit := toString (dig "limits" "memory" "" (default dict .Values.worker.resources)) }}
{{- if regexMatch "^[0-9]+(\\.[0-9]+)?[KMGT]i$" $limit }}
{{- printf "%sB" $limit }}
{{- else if regexMatch "^[0-9]+(\\.[0-9]+)?[kMGT]$" $limit }}
{{- printf "%sB" (upper $limit) }}
{{- else if regexMatch "^[0-9]+$" $limit }}
{{- $limit }}
{{- else }}
{{- fail (printf "worker.memory: empty, and worker.resources.limits.memory (%q) is not a size like 64Gi to derive it from" $limit) }}
{{- end }}
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
