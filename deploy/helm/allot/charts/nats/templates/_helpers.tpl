{{/*
The Allot chart's name ("allot", or global.nameOverride) and fullname, which names every object here as the Allot
components expect to find it: global.fullnameOverride, else the release name when it contains the name, else
<release>-<name>, at most 40 characters. The same rule as "allot.name" and "allot.fullname" in the Allot chart (a test
compares them).
*/}}
{{- define "allot-nats.allotName" -}}
{{- (.Values.global).nameOverride | default "allot" | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{- define "allot-nats.allotFullname" -}}
{{- $name := include "allot-nats.allotName" . -}}
{{- if (.Values.global).fullnameOverride -}}
{{- .Values.global.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Selector labels: those of the Allot chart's components, with the component "nats". */}}
{{- define "allot-nats.selector" -}}
app.kubernetes.io/name: {{ include "allot-nats.allotName" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: nats
{{- end -}}

{{- define "allot-nats.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: allot
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{ include "allot-nats.selector" . }}
{{- end -}}

{{/* The server's config; the pod rolls when it changes. */}}
{{- define "allot-nats.config" -}}
# sync_interval: 1s fsyncs the store every second (docs/deploy.md, "Why sync_interval: 1s").
# Clients log in with the user and password of the Secret <fullname>-nats-auth (in the server's environment).
server_name: {{ include "allot-nats.allotFullname" . }}-nats
listen: 0.0.0.0:4222
http: 0.0.0.0:8222
max_payload: 8MB
authorization {
  user: $ALLOT_NATS_USER
  password: $ALLOT_NATS_PASSWORD
}
{{- if (.Values.tls | default dict).enabled }}
# TLS only: the certificate of nats.tls.secretName, mounted at /etc/nats/tls.
tls {
  cert_file: /etc/nats/tls/tls.crt
  key_file: /etc/nats/tls/tls.key
}
{{- end }}
jetstream {
  store_dir: /data
  sync_interval: 1s
  max_file_store: {{ .Values.maxFileStore }}
  max_memory_store: 64MB
}
{{- end -}}
