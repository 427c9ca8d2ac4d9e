{{/*
A container's environment, given as YAML text, returned as it is once no
variable in it is set twice (Kubernetes would keep the last one silently: an
env map repeating one the chart sets). dict: what (the object), env.
*/}}
{{- define "entityflow.uniqueEnv" -}}
{{- $seen := dict -}}
{{- range fromYamlArray .env -}}
{{- if hasKey $seen .name -}}
{{- fail (printf "%s: environment variable %s is set twice (an env map repeats one the chart sets from its values)" $.what .name) -}}
{{- end -}}
{{- $_ := set $seen .name true -}}
{{- end -}}
{{- .env -}}
{{- end -}}

{{/* The worker container's environment; dict: root, buildId, usesNATS. */}}
{{- define "entityflow.workerEnv" -}}
{{- $root := .root -}}
{{- $w := .root.Values.worker -}}
{{ include "entityflow.commonEnv" (dict "root" $root "service" "entityflow-worker") }}
- name: TASK_QUEUES
  value: {{ join "," $w.taskQueues | quote }}
- name: METRICS_ADDR
  value: 0.0.0.0:9090
{{- if .buildId }}
- name: WORKER_DEPLOYMENT_NAME
  value: {{ required "worker.deploymentName is required for a versioned worker" $w.deploymentName | quote }}
- name: WORKER_BUILD_ID
  value: {{ .buildId | quote }}
{{- end }}
- name: CHANGE_FEED
  value: {{ $w.changeFeed | quote }}
{{- if $w.ingest }}
- name: INGEST_ENABLED
  value: "true"
- name: INGEST_STOP_TIMEOUT
  value: {{ printf "%ds" (int $w.ingestStopTimeoutSeconds) }}
{{- end }}
{{- if .usesNATS }}
{{ include "entityflow.natsEnv" (dict "root" $root "auth" $w.natsAuth) }}
{{- end }}
{{- include "entityflow.extraEnv" $w.env }}
{{- end -}}

{{/* The ingress-only container's environment. */}}
{{- define "entityflow.ingressEnv" -}}
{{- $b := .Values.busIngress -}}
{{ include "entityflow.commonEnv" (dict "root" . "service" "entityflow-ingress") }}
- name: TASK_QUEUES
  value: none
- name: INGEST_ENABLED
  value: "true"
- name: INGEST_STOP_TIMEOUT
  value: {{ printf "%ds" (int $b.stopTimeoutSeconds) }}
- name: METRICS_ADDR
  value: 0.0.0.0:9090
{{ include "entityflow.natsEnv" (dict "root" . "auth" $b.natsAuth) }}
{{- include "entityflow.extraEnv" $b.env }}
{{- end -}}

{{/* The API container's environment; dict: root, lockTTL (seconds), oidc (the OIDC settings given). */}}
{{- define "entityflow.apiEnv" -}}
{{- $a := .root.Values.api -}}
{{ include "entityflow.commonEnv" (dict "root" .root "service" "entityflow-api") }}
- name: HTTP_ADDR
  value: 0.0.0.0:8080
{{- if eq $a.idempotencyStore "redis" }}
{{ include "entityflow.secretEnv" (dict "name" "IDEMPOTENCY_STORE" "secret" (required "api.redis.existingSecret is required with idempotencyStore redis" $a.redis.existingSecret) "key" $a.redis.key) }}
{{- else }}
- name: IDEMPOTENCY_STORE
  value: {{ $a.idempotencyStore }}
{{- end }}
- name: IDEMPOTENCY_LOCK_TTL
  value: {{ printf "%ds" (int .lockTTL) }}
{{- if $a.tls.existingSecret }}
- name: HTTP_TLS_CERT
  value: /etc/entityflow/http-tls/tls.crt
- name: HTTP_TLS_KEY
  value: /etc/entityflow/http-tls/tls.key
{{- end }}
{{- if $a.metricsToken.existingSecret }}
{{ include "entityflow.secretEnv" (dict "name" "HTTP_METRICS_TOKEN" "secret" $a.metricsToken.existingSecret "key" $a.metricsToken.key) }}
{{- end }}
{{- if .oidc }}
- name: OIDC_ISSUER
  value: {{ $a.oidc.issuer | quote }}
- name: OIDC_JWKS_URL
  value: {{ $a.oidc.jwksURL | quote }}
- name: OIDC_AUDIENCE
  value: {{ $a.oidc.audience | quote }}
{{- end }}
{{- if $a.trustedProxies }}
- name: TRUSTED_PROXIES
  value: {{ $a.trustedProxies | quote }}
{{- end }}
{{- include "entityflow.extraEnv" $a.env }}
{{- end -}}
