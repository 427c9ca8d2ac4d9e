{{/* The chart's name. */}}
{{- define "entityflow.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The release's full name, the prefix of every object's name. */}}
{{- define "entityflow.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* The pods' ServiceAccount. */}}
{{- define "entityflow.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "entityflow.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The image of both programs; dict: root, tag (optional override). */}}
{{- define "entityflow.image" -}}
{{- $tag := default (default .root.Chart.AppVersion .root.Values.image.tag) .tag -}}
{{- printf "%s:%s" .root.Values.image.repository $tag -}}
{{- end -}}

{{/* Labels that select a component's pods; dict: root, component, version (optional). */}}
{{- define "entityflow.selectorLabels" -}}
app.kubernetes.io/name: {{ include "entityflow.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- if .version }}
entityflow.io/worker-version: {{ .version }}
{{- end }}
{{- end -}}

{{/* Every object's labels; dict: root, component, version (optional). */}}
{{- define "entityflow.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
app.kubernetes.io/part-of: entityflow
{{- if .root.Chart.AppVersion }}
app.kubernetes.io/version: {{ .root.Chart.AppVersion | quote }}
{{- end }}
{{ include "entityflow.selectorLabels" . }}
{{- end -}}

{{/*
A worker version's name part: its build ID made a DNS label, "unversioned"
for the empty build ID.
*/}}
{{- define "entityflow.versionSlug" -}}
{{- if eq . "" -}}
unversioned
{{- else -}}
{{- regexReplaceAll "[^a-z0-9-]+" (lower .) "-" | trimAll "-" | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* A worker version's Deployment name; dict: root, buildId. */}}
{{- define "entityflow.workerName" -}}
{{- $base := printf "%s-worker" (include "entityflow.fullname" .root | trunc 40 | trimSuffix "-") -}}
{{- if eq .buildId "" -}}
{{- $base -}}
{{- else -}}
{{- printf "%s-%s" $base (include "entityflow.versionSlug" .buildId) | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/*
Seconds a worker process may take to stop after SIGTERM: the ingress's stop
timeout (with the ingress), then each task queue's worker in turn with its
stop timeout, then 5 s to flush spans (worker/main.go flushSpans).
dict: ingest (bool), ingestStop, queues, stop.
*/}}
{{- define "entityflow.workerShutdownSeconds" -}}
{{- $ingest := ternary (int .ingestStop) 0 .ingest -}}
{{- add $ingest (mul (int .queues) (int .stop)) 5 -}}
{{- end -}}

{{/*
terminationGracePeriodSeconds: the value given, which must exceed the
shutdown, or the shutdown and 10 s. dict: given, shutdown, what.
*/}}
{{- define "entityflow.gracePeriod" -}}
{{- $shutdown := int .shutdown -}}
{{- if kindIs "invalid" .given -}}
{{- add $shutdown 10 -}}
{{- else if le (int .given) $shutdown -}}
{{- fail (printf "%s.terminationGracePeriodSeconds is %d, not above the %d s its shutdown may take" .what (int .given) $shutdown) -}}
{{- else -}}
{{- int .given -}}
{{- end -}}
{{- end -}}

{{/* Pod security context of every program: user 10001 of the image. */}}
{{- define "entityflow.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
fsGroup: 10001
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* Container security context of every program. */}}
{{- define "entityflow.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop:
    - ALL
{{- end -}}

{{/* A value from a Secret; dict: name (env), secret, key. */}}
{{- define "entityflow.secretEnv" -}}
- name: {{ .name }}
  valueFrom:
    secretKeyRef:
      name: {{ .secret }}
      key: {{ .key }}
{{- end -}}

{{/*
The settings every program shares: Temporal (address, namespace, TLS, API
key), the database, payload keys, tracing, log level. dict: root, service
(the OpenTelemetry service name).
*/}}
{{- define "entityflow.commonEnv" -}}
{{- $v := .root.Values -}}
- name: TEMPORAL_ADDRESS
  value: {{ required "temporal.address is required" $v.temporal.address | quote }}
- name: TEMPORAL_NAMESPACE
  value: {{ $v.temporal.namespace | quote }}
{{- if $v.temporal.tls.enabled }}
- name: TEMPORAL_TLS
  value: "true"
{{- if $v.temporal.tls.existingSecret }}
{{- if $v.temporal.tls.clientCertificate }}
- name: TEMPORAL_TLS_CLIENT_CERT_PATH
  value: /etc/entityflow/temporal-tls/tls.crt
- name: TEMPORAL_TLS_CLIENT_KEY_PATH
  value: /etc/entityflow/temporal-tls/tls.key
{{- end }}
{{- if $v.temporal.tls.serverCA }}
- name: TEMPORAL_TLS_SERVER_CA_CERT_PATH
  value: /etc/entityflow/temporal-tls/ca.crt
{{- end }}
{{- end }}
{{- if $v.temporal.tls.serverName }}
- name: TEMPORAL_TLS_SERVER_NAME
  value: {{ $v.temporal.tls.serverName | quote }}
{{- end }}
{{- end }}
{{- if $v.temporal.apiKey.existingSecret }}
{{ include "entityflow.secretEnv" (dict "name" "TEMPORAL_API_KEY" "secret" $v.temporal.apiKey.existingSecret "key" $v.temporal.apiKey.key) }}
{{- end }}
{{ include "entityflow.secretEnv" (dict "name" "DATABASE_URL" "secret" (required "database.existingSecret is required: the programs' PostgreSQL URL" $v.database.existingSecret) "key" $v.database.key) }}
{{- if $v.payloadKeys.existingSecret }}
{{ include "entityflow.secretEnv" (dict "name" "TEMPORAL_PAYLOAD_KEYS" "secret" $v.payloadKeys.existingSecret "key" $v.payloadKeys.key) }}
{{- end }}
{{- if $v.tracing.otlpEndpoint }}
- name: OTEL_EXPORTER_OTLP_ENDPOINT
  value: {{ $v.tracing.otlpEndpoint | quote }}
- name: OTEL_SERVICE_NAME
  value: {{ .service }}
{{- end }}
- name: LOG_LEVEL
  value: {{ $v.logLevel | quote }}
{{- end -}}

{{/* The NATS credential in force for a component; dict: root, auth (its override). */}}
{{- define "entityflow.natsAuth" -}}
{{- if and .auth .auth.type -}}
{{- toYaml .auth -}}
{{- else -}}
{{- toYaml .root.Values.nats.auth -}}
{{- end -}}
{{- end -}}

{{/* The NATS settings of the ingress and the change feed; dict: root, auth. */}}
{{- define "entityflow.natsEnv" -}}
{{- $v := .root.Values -}}
{{- $auth := include "entityflow.natsAuth" . | fromYaml -}}
- name: NATS_URL
  value: {{ required "nats.url is required" $v.nats.url | quote }}
{{- if $v.nats.tls.enabled }}
{{- if $v.nats.tls.serverCA }}
- name: NATS_CA
  value: /etc/entityflow/nats-tls/ca.crt
{{- end }}
{{- if $v.nats.tls.clientCertificate }}
- name: NATS_CERT
  value: /etc/entityflow/nats-tls/tls.crt
- name: NATS_KEY
  value: /etc/entityflow/nats-tls/tls.key
{{- end }}
{{- end }}
{{- if eq $auth.type "password" }}
- name: NATS_USER
  value: {{ required "nats auth type password needs its user" $auth.user | quote }}
{{ include "entityflow.secretEnv" (dict "name" "NATS_PASSWORD" "secret" (required "nats auth type password needs existingSecret" $auth.existingSecret) "key" (default "password" $auth.key)) }}
{{- else if eq $auth.type "token" }}
{{ include "entityflow.secretEnv" (dict "name" "NATS_TOKEN" "secret" (required "nats auth type token needs existingSecret" $auth.existingSecret) "key" (default "token" $auth.key)) }}
{{- else if eq $auth.type "creds" }}
- name: NATS_CREDS
  value: /etc/entityflow/nats-auth/{{ default "user.creds" $auth.key }}
{{- else if eq $auth.type "nkey" }}
- name: NATS_NKEY
  value: /etc/entityflow/nats-auth/{{ default "user.nk" $auth.key }}
{{- else if ne $auth.type "none" }}
{{- fail (printf "nats auth type %q: want none, password, token, creds or nkey" $auth.type) }}
{{- end }}
{{- end -}}

{{/* The Temporal TLS volume, when its files are mounted. */}}
{{- define "entityflow.temporalTLSVolume" -}}
{{- $tls := .Values.temporal.tls -}}
{{- if and $tls.enabled $tls.existingSecret (or $tls.clientCertificate $tls.serverCA) }}
- name: temporal-tls
  secret:
    secretName: {{ $tls.existingSecret }}
    defaultMode: 0440
    items:
      {{- if $tls.clientCertificate }}
      - key: tls.crt
        path: tls.crt
      - key: tls.key
        path: tls.key
      {{- end }}
      {{- if $tls.serverCA }}
      - key: ca.crt
        path: ca.crt
      {{- end }}
{{- end }}
{{- end -}}

{{/* The Temporal TLS volume's mount. */}}
{{- define "entityflow.temporalTLSMount" -}}
{{- $tls := .Values.temporal.tls -}}
{{- if and $tls.enabled $tls.existingSecret (or $tls.clientCertificate $tls.serverCA) }}
- name: temporal-tls
  mountPath: /etc/entityflow/temporal-tls
  readOnly: true
{{- end }}
{{- end -}}

{{/* The NATS TLS and credential volumes; dict: root, auth. */}}
{{- define "entityflow.natsVolumes" -}}
{{- $tls := .root.Values.nats.tls -}}
{{- $auth := include "entityflow.natsAuth" . | fromYaml -}}
{{- if and $tls.enabled (or $tls.clientCertificate $tls.serverCA) }}
- name: nats-tls
  secret:
    secretName: {{ required "nats.tls.existingSecret is required with nats.tls.enabled" $tls.existingSecret }}
    defaultMode: 0440
    items:
      {{- if $tls.serverCA }}
      - key: ca.crt
        path: ca.crt
      {{- end }}
      {{- if $tls.clientCertificate }}
      - key: tls.crt
        path: tls.crt
      - key: tls.key
        path: tls.key
      {{- end }}
{{- end }}
{{- if or (eq $auth.type "creds") (eq $auth.type "nkey") }}
{{- $key := default (ternary "user.creds" "user.nk" (eq $auth.type "creds")) $auth.key }}
- name: nats-auth
  secret:
    secretName: {{ required (printf "nats auth type %s needs existingSecret" $auth.type) $auth.existingSecret }}
    defaultMode: 0440
    items:
      - key: {{ $key }}
        path: {{ $key }}
{{- end }}
{{- end -}}

{{/* The NATS volumes' mounts; dict: root, auth. */}}
{{- define "entityflow.natsMounts" -}}
{{- $tls := .root.Values.nats.tls -}}
{{- $auth := include "entityflow.natsAuth" . | fromYaml -}}
{{- if and $tls.enabled (or $tls.clientCertificate $tls.serverCA) }}
- name: nats-tls
  mountPath: /etc/entityflow/nats-tls
  readOnly: true
{{- end }}
{{- if or (eq $auth.type "creds") (eq $auth.type "nkey") }}
- name: nats-auth
  mountPath: /etc/entityflow/nats-auth
  readOnly: true
{{- end }}
{{- end -}}

{{/*
Extra settings as environment variables, from a map. A whole number stays
one (YAML numbers reach templates as floats, which print 1e+06).
*/}}
{{- define "entityflow.extraEnv" -}}
{{- range $name, $value := . }}
{{- $text := toString $value }}
{{- if and (kindIs "float64" $value) (eq $value (float64 (int64 $value))) }}
{{- $text = int64 $value | toString }}
{{- end }}
- name: {{ $name }}
  value: {{ $text | quote }}
{{- end }}
{{- end -}}

{{/* Scheduling settings of a component's pods, from its values. */}}
{{- define "entityflow.scheduling" -}}
{{- with .nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .topologySpreadConstraints }}
topologySpreadConstraints:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{/*
A component's pod annotations: Prometheus's scrape annotations (its
/metrics on port 9090) when scrape and metrics.podAnnotations, and its own.
dict: root, extra, scrape.
*/}}
{{- define "entityflow.podAnnotations" -}}
{{- $a := dict -}}
{{- if and .scrape .root.Values.metrics.podAnnotations -}}
{{- $_ := set $a "prometheus.io/scrape" "true" -}}
{{- $_ := set $a "prometheus.io/port" "9090" -}}
{{- $_ := set $a "prometheus.io/path" "/metrics" -}}
{{- end -}}
{{- $a = merge (deepCopy (default dict .extra)) $a -}}
{{- if $a -}}
{{- toYaml $a -}}
{{- end -}}
{{- end -}}
