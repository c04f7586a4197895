{{/*
The Allot chart's name ("allot", or global.nameOverride) and fullname, which names every object here as the Allot
components expect to find it: global.fullnameOverride, else the release name when it contains the name, else
<release>-<name>, at most 40 characters. The same rule as "allot.name" and "allot.fullname" in the Allot chart (a test
compares them).
*/}}
{{- define "allot-postgresql.allotName" -}}
{{- (.Values.global).nameOverride | default "allot" | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{- define "allot-postgresql.allotFullname" -}}
{{- $name := include "allot-postgresql.allotName" . -}}
{{- if (.Values.global).fullnameOverride -}}
{{- .Values.global.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Selector labels: those of the Allot chart's components, with the component "postgresql". */}}
{{- define "allot-postgresql.selector" -}}
app.kubernetes.io/name: {{ include "allot-postgresql.allotName" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: postgresql
{{- end -}}

{{- define "allot-postgresql.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: allot
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{ include "allot-postgresql.selector" . }}
{{- end -}}
