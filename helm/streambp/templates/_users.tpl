{{/*
The users file the chart renders (templates/secret.yaml): auth.users (a map,
or its YAML text), checked by the rules the coordinator applies (so that a
mistake fails `helm install` instead of the coordinator's start or reload),
plus the admin (auth.admin.name, a generated token) and this release's
workers (<fullname>-worker, with the workers' token when the chart knows it).
Called with (dict "ctx" $ "adminName" NAME "adminHash" SHA256 "workerHash" SHA256),
the SHA-256 of the admin's and the workers' tokens; an empty hash adds no
entry.
*/}}
{{- define "streambp.usersFile" -}}
{{- $ctx := .ctx }}
{{- $given := $ctx.Values.auth.users }}
{{- $file := dict }}
{{- if kindIs "string" $given }}
{{- $file = fromYaml $given }}
{{- if hasKey $file "Error" }}
{{- fail (printf "auth.users: not a YAML mapping with users and workers: %s" (get $file "Error")) }}
{{- end }}
{{- else if $given }}
{{- $file = deepCopy $given }}
{{- end }}
{{- range $key, $_ := $file }}
{{- if not (has $key (list "users" "workers")) }}
{{- fail (printf "auth.users: unknown key '%s' (users and workers)" $key) }}
{{- end }}
{{- end }}
{{- $hashes := dict }}
{{- $lists := dict }}
{{- range $section := list "users" "workers" }}
{{- $entries := get $file $section | default list }}
{{- if not (kindIs "slice" $entries) }}
{{- fail (printf "auth.users: %s must be a list" $section) }}
{{- end }}
{{- $names := dict }}
{{- range $i, $entry := $entries }}
{{- $where := printf "auth.users: %s[%d]" $section $i }}
{{- if not (kindIs "map" $entry) }}
{{- fail (printf "%s must be a mapping" $where) }}
{{- end }}
{{- $allowed := ternary (list "name" "role" "token_sha256" "quota") (list "name" "token_sha256") (eq $section "users") }}
{{- range $key, $_ := $entry }}
{{- if not (has $key $allowed) }}
{{- fail (printf "%s: unknown key '%s' (%s)" $where $key (join ", " $allowed)) }}
{{- end }}
{{- end }}
{{- $name := toString (get $entry "name") }}
{{- if not (regexMatch "^[a-z0-9._-]{1,64}$" $name) }}
{{- fail (printf "%s.name: %q must be 1-64 characters of lower-case letters, digits, '-', '_' and '.'" $where $name) }}
{{- end }}
{{- if hasKey $names $name }}
{{- fail (printf "auth.users: %s: the name '%s' is listed twice" $section $name) }}
{{- end }}
{{- $_ := set $names $name true }}
{{- if eq $section "users" }}
{{- $role := toString (get $entry "role" | default "user") }}
{{- if not (has $role (list "user" "admin")) }}
{{- fail (printf "%s.role: must be user or admin (got '%s')" $where $role) }}
{{- end }}
{{- with get $entry "quota" }}
{{- if not (kindIs "map" .) }}
{{- fail (printf "%s.quota: must be a mapping" $where) }}
{{- end }}
{{- range $key, $value := . }}
{{- /* Numbers arrive as float64 from values files, int64 from --set and fromYaml. */}}
{{- $integer := or (kindIs "int" $value) (kindIs "int64" $value) (and (kindIs "float64" $value) (eq $value ($value | int64 | float64))) }}
{{- if eq $key "max_priority" }}
{{- if not $integer }}
{{- fail (printf "%s.quota.max_priority: must be an integer" $where) }}
{{- end }}
{{- else if has $key (list "max_running_workers" "max_pending_jobs") }}
{{- if not (and $integer (ge (int64 $value) 0)) }}
{{- fail (printf "%s.quota.%s: must be a non-negative integer" $where $key) }}
{{- end }}
{{- else }}
{{- fail (printf "%s.quota: unknown key '%s' (max_running_workers, max_pending_jobs, max_priority)" $where $key) }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- $tokens := get $entry "token_sha256" }}
{{- if not (and (kindIs "slice" $tokens) $tokens) }}
{{- fail (printf "%s.token_sha256: must list at least one hex SHA-256 (printf %%s \"$TOKEN\" | sha256sum), never the token itself" $where) }}
{{- end }}
{{- range $j, $hash := $tokens }}
{{- if not (regexMatch "^[0-9a-fA-F]{64}$" (toString $hash)) }}
{{- fail (printf "%s.token_sha256[%d]: must be 64 hex digits (printf %%s \"$TOKEN\" | sha256sum), never the token itself" $where $j) }}
{{- end }}
{{- if hasKey $hashes (lower $hash) }}
{{- fail (printf "%s.token_sha256[%d]: this token hash is listed twice" $where $j) }}
{{- end }}
{{- $_ := set $hashes (lower $hash) true }}
{{- end }}
{{- end }}
{{- $_ := set $lists $section (list $entries $names) }}
{{- end }}

{{- $users := index $lists.users 0 }}
{{- if .adminName }}
{{- if hasKey (index $lists.users 1) .adminName }}
{{- fail (printf "auth.users lists a user named '%s', the name of the admin the chart adds: set auth.admin.name to another name, or to \"\" for none" .adminName) }}
{{- end }}
{{- if hasKey $hashes .adminHash }}
{{- fail (printf "auth.users lists the hash of the admin %s's token for another identity: each token belongs to one" .adminName) }}
{{- end }}
{{- $_ := set $hashes .adminHash true }}
{{- $users = append $users (dict "name" .adminName "role" "admin" "token_sha256" (list .adminHash)) }}
{{- end }}
{{- if not $users }}
{{- fail "auth: nobody could call the coordinator: auth.users lists no users and auth.admin.name is empty" }}
{{- end }}
{{- $workers := index $lists.workers 0 }}
{{- $workerName := include "streambp.workerName" $ctx }}
{{- if .workerHash }}
{{- if hasKey (index $lists.workers 1) $workerName }}
{{- fail (printf "auth.users lists a worker named '%s', the name the chart gives this release's workers with the hash of their token: drop that entry, or give the token with auth.existingWorkerTokenSecret and keep it" $workerName) }}
{{- end }}
{{- if hasKey $hashes .workerHash }}
{{- fail "auth.users lists the hash of the workers' token for another identity: each token belongs to one" }}
{{- end }}
{{- $workers = append $workers (dict "name" $workerName "token_sha256" (list .workerHash)) }}
{{- else if not $workers }}
{{- fail "auth.users lists no workers: add the SHA-256 of the token in auth.existingWorkerTokenSecret under workers:" }}
{{- end }}
{{- $_ := set $file "users" $users }}
{{- $_ := set $file "workers" $workers }}
# Rendered by the streambp chart from auth.users{{ if .adminName }}, with the admin {{ .adminName | quote }}{{ end }}{{ if .workerHash }} and the workers {{ $workerName | quote }}{{ end }}.
# SHA-256 of each bearer token only; the coordinator re-reads this file when it changes.
{{ toYaml $file }}
{{- end }}
