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
{{- coalesce .Values.auth.existingSecret .Values.auth.existingWorkerTokenSecret .Values.auth.existingTokenSecret (include "streambp.generatedTokenSecret" .) }}
{{- end }}

{{/* The Secret with a client token (key auth.clientTokenKey) for `helm test` and NOTES; empty: none. */}}
{{- define "streambp.clientTokenSecret" -}}
{{- if .Values.auth.existingSecret }}
{{- .Values.auth.existingSecret }}
{{- else if include "streambp.adminName" . }}
{{- default (include "streambp.generatedTokenSecret" .) .Values.auth.existingTokenSecret }}
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
{{- range $key := list "existingUsersSecret" "workerToken" "existingWorkerTokenSecret" "existingTokenSecret" }}
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
{{- if and $auth.existingTokenSecret (or $auth.workerToken $auth.existingWorkerTokenSecret) }}
{{- fail "auth.existingTokenSecret holds the workers' token: drop auth.workerToken and auth.existingWorkerTokenSecret" }}
{{- end }}
{{- if and $auth.existingUsersSecret (not (or $auth.workerToken $auth.existingWorkerTokenSecret $auth.existingTokenSecret)) }}
{{- fail "auth.existingUsersSecret: the chart adds nothing to a users file it does not render; give the workers' token with auth.existingWorkerTokenSecret (or auth.workerToken) and list its SHA-256 under workers: in the file" }}
{{- end }}
{{- if and (or $auth.admin.tokenSha256 $auth.workerTokenSha256) (not $auth.existingTokenSecret) }}
{{- fail "auth.admin.tokenSha256 and auth.workerTokenSha256 are the hashes of the tokens in auth.existingTokenSecret: set that too, or drop them" }}
{{- end }}
{{- end }}
{{- if and (eq .Values.worker.device "cpu") (hasKey (default dict (dig "limits" dict (default dict .Values.worker.resources))) "nvidia.com/gpu") }}
{{- fail "worker.resources.limits asks for nvidia.com/gpu, but worker.device is cpu: drop it (the chart adds the GPUs of cuda workers itself)" }}
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

{{- /* A size for an sbp flag (--memory, --host-memory, --offload-disk) in a
form sbp's ParseByteSize reads the way Kubernetes means it: a Kubernetes
quantity (72Gi -> 72GiB, 64G -> 64GB = 64*10^9 bytes, 500M -> 500MB, 1e9 as
is), a size of sbp's (72GiB, 64GB) or a number of bytes (from a values file,
a float64; from --set, an int64). Fails naming .field. Called with
(dict "field" F "size" S). */}}
{{- define "streambp.sizeArg" -}}
{{- $size := .size }}
{{- if or (kindIs "float64" $size) (kindIs "int64" $size) (kindIs "int" $size) }}
{{- $size = int64 $size | toString }}
{{- end }}
{{- $size = toString $size }}
{{- if regexMatch "^[0-9]+(\\.[0-9]+)?[KMGT]i$" $size }}
{{- printf "%sB" $size }}
{{- else if regexMatch "^[0-9]+(\\.[0-9]+)?[kMGT]$" $size }}
{{- printf "%sB" (upper $size) }}
{{- else if regexMatch "^[0-9]+(\\.[0-9]+)?([eE][0-9]+| ?([KMGT]i?B|kB|B))?$" $size }}
{{- $size }}
{{- else }}
{{- fail (printf "%s: %q is not a size like 72Gi, 64G, 72GiB or a number of bytes" .field $size) }}
{{- end }}
{{- end }}

{{- /* The bytes of a size as streambp.sizeArg renders it, as an integer
string. Called with (dict "field" F "size" S). */}}
{{- define "streambp.sizeBytes" -}}
{{- $size := include "streambp.sizeArg" . | replace " " "" }}
{{- $number := regexReplaceAll "^([0-9]+(\\.[0-9]+)?).*$" $size "${1}" | float64 }}
{{- $exponent := regexReplaceAll "^[0-9.]+([eE]([0-9]+))?.*$" $size "${2}" | default "0" | int }}
{{- $unit := regexReplaceAll "^[0-9.]+([eE][0-9]+)?" $size "" | upper }}
{{- $factors := dict "" 1.0 "B" 1.0 "KB" 1e3 "MB" 1e6 "GB" 1e9 "TB" 1e12 "KIB" 1024.0 "MIB" 1048576.0 "GIB" 1073741824.0 "TIB" 1099511627776.0 }}
{{- $bytes := mulf $number (get $factors $unit) }}
{{- range until $exponent }}{{ $bytes = mulf $bytes 10 }}{{ end }}
{{- printf "%d" (int64 (floor $bytes)) }}
{{- end }}

{{- /* A byte count as a short sbp size: 68719476736 -> 64GiB. */}}
{{- define "streambp.formatBytes" -}}
{{- $bytes := int64 . }}
{{- if and (gt $bytes 0) (eq (mod $bytes 1073741824) 0) }}
{{- printf "%dGiB" (div $bytes 1073741824) }}
{{- else if and (gt $bytes 0) (eq (mod $bytes 1048576) 0) }}
{{- printf "%dMiB" (div $bytes 1048576) }}
{{- else }}
{{- printf "%d" $bytes }}
{{- end }}
{{- end }}

{{- /* The worker's --memory: worker.memory, or for cpu workers the container's
memory limit. */}}
{{- define "streambp.workerMemory" -}}
{{- $size := .Values.worker.memory }}
{{- if or (kindIs "float64" $size) (kindIs "int64" $size) (kindIs "int" $size) }}
{{- include "streambp.sizeArg" (dict "field" "worker.memory" "size" $size) }}
{{- else if $size }}
{{- include "streambp.sizeArg" (dict "field" "worker.memory" "size" $size) }}
{{- else if eq .Values.worker.device "cuda" }}
{{- fail "worker.memory: set the GPU memory budget of each worker (e.g. 72Gi) when worker.device is cuda" }}
{{- else }}
{{- $limit := dig "limits" "memory" "" (default dict .Values.worker.resources) }}
{{- if not $limit }}
{{- fail "worker.memory: empty, and worker.resources.limits.memory gives no limit to take it from: set one of the two" }}
{{- end }}
{{- include "streambp.sizeArg" (dict "field" "worker.resources.limits.memory" "size" $limit) }}
{{- end }}
{{- end }}

{{- /* The worker's --host-memory; empty: none given (the worker reads its
cgroup). With whole-node pods and no worker.hostMemory, each worker's share
of the container's memory limit. */}}
{{- define "streambp.workerHostMemory" -}}
{{- if .Values.worker.hostMemory }}
{{- include "streambp.sizeArg" (dict "field" "worker.hostMemory" "size" .Values.worker.hostMemory) }}
{{- else if gt (int (include "streambp.workersPerPod" .)) 1 }}
{{- with dig "limits" "memory" "" (default dict .Values.worker.resources) }}
{{- $bytes := include "streambp.sizeBytes" (dict "field" "worker.resources.limits.memory" "size" .) | int64 }}
{{- include "streambp.formatBytes" (div $bytes (int64 (include "streambp.workersPerPod" $))) }}
{{- end }}
{{- end }}
{{- end }}

{{- /* "true" for whole-node worker pods: cuda with worker.wholeNode. */}}
{{- define "streambp.wholeNode" -}}
{{- if and (eq .Values.worker.device "cuda") .Values.worker.wholeNode }}true{{ end }}
{{- end }}

{{- /* sbp-worker processes (and GPUs) per worker pod; 1 for cpu workers. */}}
{{- define "streambp.workersPerPod" -}}
{{- if include "streambp.wholeNode" . }}{{ int .Values.worker.gpusPerNode }}{{ else }}1{{ end }}
{{- end }}

{{- /* The worker pod's metrics ports: a list of {name, port, gpu} (gpu: -1 for
the one port of a single-worker pod). */}}
{{- define "streambp.workerMetricsPorts" -}}
{{- $ports := list }}
{{- if include "streambp.wholeNode" . }}
{{- range $i := until (int .Values.worker.gpusPerNode) }}
{{- $ports = append $ports (dict "name" (printf "metrics-gpu%d" $i) "port" (add (int $.Values.worker.metricsPort) $i) "gpu" $i) }}
{{- end }}
{{- else }}
{{- $ports = append $ports (dict "name" "metrics" "port" (int .Values.worker.metricsPort) "gpu" -1) }}
{{- end }}
{{- toJson $ports }}
{{- end }}

{{- /* The data of the Secret named .name in the release's namespace, as JSON
(base64 values); {} when the cluster cannot be read: Helm's lookup answers
nothing to helm template, helm install --dry-run (client) and GitOps tools
that render with helm template. Called with (dict "ctx" $ "name" NAME).
(tests/deploy/check swaps the lookup below for a stand-in cluster.) */}}
{{- define "streambp.existingSecretData" -}}
{{- $found := lookup "v1" "Secret" .ctx.Release.Namespace .name }}
{{- dig "data" dict (default dict $found) | toJson }}
{{- end }}

{{- /* The SHA-256 of a token in auth.existingTokenSecret: read from the Secret
(.data, from streambp.existingSecretData) where the chart can read it, else
.given (auth.admin.tokenSha256, auth.workerTokenSha256); both: they must
match. Called with (dict "data" D "secret" S "key" K "given" H "field" F). */}}
{{- define "streambp.ownTokenHash" -}}
{{- $given := lower (toString (default "" .given)) }}
{{- $read := "" }}
{{- if hasKey .data .key }}
{{- $read = get .data .key | b64dec | sha256sum }}
{{- end }}
{{- if and $given $read (ne $given $read) }}
{{- fail (printf "%s does not match the token in Secret %s (key %s): correct it, or drop it to take the Secret's" .field .secret .key) }}
{{- else if $given }}
{{- $given }}
{{- else if $read }}
{{- $read }}
{{- else if .data }}
{{- fail (printf "auth.existingTokenSecret: the Secret %s has no key %s (auth.clientTokenKey, auth.workerTokenKey)" .secret .key) }}
{{- else }}
{{- fail (printf "%s: give the SHA-256 of the token in Secret %s (key %s), printf %%s \"$TOKEN\" | sha256sum: this render cannot read the Secret (helm template, client-side dry runs and GitOps tools that render with helm template see no cluster; helm install/upgrade reads it)" .field .secret .key) }}
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
