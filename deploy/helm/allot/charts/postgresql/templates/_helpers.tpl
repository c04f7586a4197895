{{/*
The Allot chart's fullname, which names every object here as the Allot components expect to find it
(<fullname>-postgresql, the Secret <fullname>-database): the release name when it contains "allot", else
<release>-allot, at most 40 characters. The same rule as "allot.fullname" in the Allot chart (a test compares them).
*/}}
{{- define "allot-postgresql.allotFullname" -}}
{{- if contains "allot" .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-allot" .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Selector labels: those of the Allot chart's components, with the component "postgresql". */}}
{{- define "allot-postgresql.selector" -}}
app.kubernetes.io/name: allot
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
