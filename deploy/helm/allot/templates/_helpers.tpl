{{/*
Names and labels. With the release name "allot" and no overrides, every object is named as in deploy/k8s/base
(allot-binder, ...). nameOverride replaces the chart's name "allot" (in the fullname and the app.kubernetes.io/name
label); fullnameOverride replaces the fullname, the prefix of every object's name. The bundled PostgreSQL and NATS
read the same two settings from global (global.nameOverride, global.fullnameOverride), which this chart reads too.
*/}}
{{- define "allot.name" -}}
{{- .Values.nameOverride | default (.Values.global).nameOverride | default .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}

{{- define "allot.fullname" -}}
{{- $override := .Values.fullnameOverride | default (.Values.global).fullnameOverride -}}
{{- $name := include "allot.name" . -}}
{{- if $override -}}
{{- $override | trunc 40 | trimSuffix "-" -}}
{{- else if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "allot.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: allot
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end -}}

{{/* Selector labels of one component: name, instance, component (never change between releases). */}}
{{- define "allot.selector" -}}
app.kubernetes.io/name: {{ include "allot.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "allot.componentLabels" -}}
{{ include "allot.labels" .root }}
{{ include "allot.selector" . }}
{{- end -}}

{{/*
The image of one process (dict "root" . "component" name), as scripts/build-images tags them: the CLI image
<repository>:<tag>, which runs every process, or with image.perProcess the process's own image
<repository>-<component>:<tag> (the Dockerfile target of that name; the migration Job runs the CLI image). The tag
defaults to the chart's appVersion, the version the images of the same commit are tagged with.
*/}}
{{- define "allot.image" -}}
{{- $image := .root.Values.image -}}
{{- $tag := $image.tag | default .root.Chart.AppVersion -}}
{{- if and $image.perProcess (ne .component "migrate") -}}
{{ $image.repository }}-{{ .component }}:{{ $tag }}
{{- else -}}
{{ $image.repository }}:{{ $tag }}
{{- end -}}
{{- end -}}

{{/* The ServiceAccount's annotations (dict "root" . "component" name): serviceAccount.annotations, then the
component's serviceAccountAnnotations over them (e.g. a cloud workload identity for one process). */}}
{{- define "allot.serviceAccountAnnotations" -}}
{{- $values := index .root.Values.components .component | default dict -}}
{{- $annotations := merge (deepCopy ($values.serviceAccountAnnotations | default dict)) (deepCopy .root.Values.serviceAccount.annotations) -}}
{{- with $annotations }}
annotations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end -}}

{{- define "allot.priorityClassName" -}}
{{- .Values.priorityClass.name | default (printf "%s-control-plane" (include "allot.fullname" .)) -}}
{{- end -}}

{{/*
The values that need each other, checked together: every problem is reported at once, whichever template runs first.
*/}}
{{- define "allot.checks" -}}
{{- $problems := list -}}
{{- $pg := .Values.postgresql -}}
{{- $given := 0 -}}
{{- if $pg.url }}{{ $given = add1 $given }}{{ end -}}
{{- if $pg.existingSecret.name }}{{ $given = add1 $given }}{{ end -}}
{{- if $pg.enabled }}{{ $given = add1 $given }}{{ end -}}
{{- if and $pg.enabled (or $pg.url $pg.existingSecret.name) -}}
{{- $problems = append $problems "postgresql: postgresql.url or postgresql.existingSecret.name is set and so is postgresql.enabled (the bundled PostgreSQL); set postgresql.enabled=false to use your own server" -}}
{{- else if ne $given 1 -}}
{{- $problems = append $problems (printf "postgresql: set exactly one of postgresql.url, postgresql.existingSecret.name or postgresql.enabled (%d given)" $given) -}}
{{- end -}}
{{- if and .Values.nats.url .Values.nats.enabled -}}
{{- $problems = append $problems "nats: nats.url is set and so is nats.enabled (the bundled NATS); set nats.enabled=false to use your own server" -}}
{{- else if not (or .Values.nats.url .Values.nats.enabled) -}}
{{- $problems = append $problems "nats: set nats.url (a NATS server with JetStream) or nats.enabled=true" -}}
{{- end -}}
{{- /*
The bundled servers cannot read priorityClass: their priorityClassName defaults to the PriorityClass this chart
creates by default, and must be set when the control plane's is another one (or none).
*/ -}}
{{- $own := "" -}}
{{- if or .Values.priorityClass.create .Values.priorityClass.name -}}
{{- $own = include "allot.priorityClassName" . -}}
{{- end -}}
{{- $default := printf "%s-control-plane" (include "allot.fullname" .) -}}
{{- range $name := list "postgresql" "nats" -}}
{{- $sub := index $.Values $name -}}
{{- if and $sub.enabled $sub.priorityClassName -}}
{{- $class := tpl $sub.priorityClassName $ -}}
{{- if and (eq $class $default) (ne $class $own) -}}
{{- $problems = append $problems (printf "%s: the bundled %s would run under the PriorityClass %q, which is not the control plane's (priorityClass); set %s.priorityClassName=%q" $name $name $class $name $own) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if and .Values.nats.tls.enabled (not .Values.nats.tls.secretName) -}}
{{- $problems = append $problems "nats: nats.tls.enabled needs nats.tls.secretName (a Secret with ca.crt, and tls.crt and tls.key for the bundled NATS)" -}}
{{- end -}}
{{- if and .Values.nats.url .Values.nats.tls.enabled (not (hasPrefix "tls://" .Values.nats.url)) -}}
{{- $problems = append $problems "nats: nats.tls.enabled needs a tls:// nats.url, so the connection cannot fall back to plain text" -}}
{{- end -}}
{{- if and .Values.nats.url (regexMatch "^[a-z]+://[^/]*@" .Values.nats.url) -}}
{{- $problems = append $problems "nats: nats.url holds credentials, which would land in a ConfigMap; put them in a Secret and set nats.existingSecret" -}}
{{- end -}}
{{- if and .Values.nats.enabled .Values.nats.existingSecret -}}
{{- $problems = append $problems "nats: nats.existingSecret is for a server of yours; the bundled NATS (nats.enabled) makes its own credentials" -}}
{{- end -}}
{{- $global := .Values.global | default dict -}}
{{- range $key := list "nameOverride" "fullnameOverride" -}}
{{- $value := index $.Values $key | default "" -}}
{{- if and $value (or $.Values.postgresql.enabled $.Values.nats.enabled) (ne $value (index $global $key | default "")) -}}
{{- $problems = append $problems (printf "%s: the bundled PostgreSQL and NATS name their objects after this chart's but read global.%s only; set global.%s=%s instead (this chart reads it too)" $key $key $key $value) -}}
{{- end -}}
{{- end -}}
{{- if .Values.nodeAgent.enabled -}}
{{- $problems = concat $problems (include "allot.nodeAgentChecks" . | fromYamlArray) -}}
{{- end -}}
{{- $le := .Values.leaderElection -}}
{{- if not (and (gt (float64 $le.leaseDurationSeconds) (float64 $le.renewDeadlineSeconds)) (gt (float64 $le.renewDeadlineSeconds) (float64 $le.retryPeriodSeconds))) -}}
{{- $problems = append $problems (printf "leaderElection: leaseDurationSeconds (%v) > renewDeadlineSeconds (%v) > retryPeriodSeconds (%v) must hold" $le.leaseDurationSeconds $le.renewDeadlineSeconds $le.retryPeriodSeconds) -}}
{{- end -}}
{{- if $problems -}}
{{- fail (printf "\n- %s" (join "\n- " $problems)) -}}
{{- end -}}
{{- end -}}

{{/* The Secret and key holding ALLOT_DATABASE_URL. */}}
{{- define "allot.databaseSecret" -}}
{{- include "allot.checks" . -}}
{{- if .Values.postgresql.existingSecret.name -}}
name: {{ .Values.postgresql.existingSecret.name }}
key: {{ .Values.postgresql.existingSecret.key | default "url" }}
{{- else -}}
name: {{ include "allot.fullname" . }}-database
key: url
{{- end -}}
{{- end -}}

{{/* The relay's anchor key (docs/security.md, "The anchored chain"): the Secret and key holding it. */}}
{{- define "allot.anchorSecret" -}}
{{- if .Values.anchor.existingSecret.name -}}
name: {{ .Values.anchor.existingSecret.name }}
key: {{ .Values.anchor.existingSecret.key | default "key.pem" }}
{{- else -}}
name: {{ include "allot.fullname" . }}-anchor-key
key: key.pem
{{- end -}}
{{- end -}}

{{- define "allot.natsUrl" -}}
{{- include "allot.checks" . -}}
{{- if .Values.nats.url -}}
{{- .Values.nats.url -}}
{{- else -}}
{{ ternary "tls" "nats" .Values.nats.tls.enabled }}://{{ include "allot.fullname" . }}-nats:4222
{{- end -}}
{{- end -}}

{{/* The Secret whose keys (ALLOT_NATS_USER, ALLOT_NATS_PASSWORD or ALLOT_NATS_TOKEN) every Allot process gets as
environment variables: the bundled NATS's, or the user's; empty for a server of the user's without one. */}}
{{- define "allot.natsSecret" -}}
{{- if .Values.nats.enabled -}}
{{ include "allot.fullname" . }}-nats-auth
{{- else -}}
{{ .Values.nats.existingSecret }}
{{- end -}}
{{- end -}}

{{/* Where the CA that verifies NATS's certificate is mounted in every Allot pod (nats.tls.enabled). */}}
{{- define "allot.natsCaDir" -}}/etc/allot-nats-tls{{- end -}}

{{/* What an Allot container needs to reach NATS: the credentials' Secret (envFrom), the CA (volume, mount). */}}
{{- define "allot.natsEnvFrom" -}}
{{- with include "allot.natsSecret" . }}
- secretRef:
    name: {{ . }}
{{- end }}
{{- end -}}

{{- define "allot.natsMount" -}}
{{- if .Values.nats.tls.enabled }}
- name: nats-tls
  mountPath: {{ include "allot.natsCaDir" . }}
  readOnly: true
{{- end }}
{{- end -}}

{{- define "allot.natsVolume" -}}
{{- if .Values.nats.tls.enabled }}
- name: nats-tls
  secret:
    secretName: {{ .Values.nats.tls.secretName }}
    items:
      - key: ca.crt
        path: ca.crt
{{- end }}
{{- end -}}

{{/*
The components: what each runs, where, and what it may do on the API server. The RBAC rules are the ones of
deploy/k8s/base (tests/deploy/test_helm_workloads.py checks that both grant the same). Deciders are the services that
take part in leader election.
*/}}
{{- define "allot.components" -}}
relay:
  kind: Deployment
  command: [allot-relay]
  singleton: true
ui:
  kind: Deployment
  command: [allot-ui, --host, 0.0.0.0, --port, "8080"]
  singleton: true
kube-sync:
  kind: Deployment
  command: [allot-kube-sync]
  leased: true
  schedulerName: true
  rules:
    - apiGroups: [""]
      resources: [pods]
      verbs: [list, watch]
    - apiGroups: [scheduling.sigs.k8s.io]
      resources: [elasticquotas, podgroups]
      verbs: [list, watch]
    - apiGroups: [quota.koordinator.sh]
      resources: [elasticquotaprofiles]
      verbs: [list, watch]
    - apiGroups: [scheduling.koordinator.sh]
      resources: [reservations, podmigrationjobs]
      verbs: [list, watch]
gang-coordinator:
  kind: Deployment
  command: [allot-gang-coordinator]
  decider: true
quota-manager:
  kind: Deployment
  command: [allot-quota-manager]
  decider: true
reservation-manager:
  kind: Deployment
  command: [allot-reservation-manager]
  decider: true
  kubeMode: true
  rules:
    - apiGroups: [scheduling.koordinator.sh]
      resources: [reservations/status, podmigrationjobs/status]
      verbs: [patch]
    - apiGroups: [scheduling.koordinator.sh]
      resources: [reservations, podmigrationjobs]
      verbs: [delete]
    - apiGroups: [scheduling.koordinator.sh]
      resources: [podmigrationjobs]
      verbs: [create, get]
device-allocator:
  kind: Deployment
  command: [allot-device-allocator]
  decider: true
binder:
  kind: Deployment
  command: [allot-binder]
  decider: true
  kubeMode: true
  rules:
    - apiGroups: [""]
      resources: [pods/binding, pods/eviction]
      verbs: [create]
    - apiGroups: [scheduling.sigs.k8s.io]
      resources: [elasticquotas, elasticquotas/status]
      verbs: [patch]
    - apiGroups: [events.k8s.io]
      resources: [events]
      verbs: [create, patch]
    - apiGroups: [""]
      resources: [pods/status, nodes/status]
      verbs: [patch]
    - apiGroups: [scheduling.sigs.k8s.io]
      resources: [podgroups/status]
      verbs: [patch]
node-reporter:
  kind: DaemonSet
  command: [allot-node-reporter]
  kubeMode: true
  rules:
    - apiGroups: [""]
      resources: [nodes]
      verbs: [list, watch]
    - apiGroups: [scheduling.koordinator.sh]
      resources: [devices]
      verbs: [list, watch]
    - apiGroups: [topology.node.k8s.io]
      resources: [noderesourcetopologies]
      verbs: [list, watch]
    - apiGroups: [slo.koordinator.sh]
      resources: [nodemetrics]
      verbs: [list, watch]
qos-enforcer:
  kind: DaemonSet
  command: [allot-qos-enforcer]
  # The node agent needs the host's cgroups and root (nodeAgent.enabled); off, plans are still decided and recorded
  # (docs/enforcement.md, "Running the node agent").
  nodeAgent: {{ .Values.nodeAgent.enabled }}
  env:
    ALLOT_QOS_AGENT: {{ ternary "on" "off" .Values.nodeAgent.enabled | quote }}
    {{- if and .Values.nodeAgent.enabled .Values.nodeAgent.dryRun }}
    ALLOT_QOS_DRY_RUN: "1"
    {{- end }}
{{- end -}}

{{/*
The node agent's host directories (nodeAgent.hostPaths), each mounted at its own path: the agent writes cgroup
files, CDI specs and resctrl groups, and creates HAMi-core's per-container cache and lock directories, at the paths
the container runtime and the GPU containers see. "" leaves one out.
*/}}
{{- define "allot.nodeAgentPaths" -}}
{{- $paths := .Values.nodeAgent.hostPaths -}}
{{- $types := dict "cgroup" "Directory" "cdi" "DirectoryOrCreate" "vgpu" "DirectoryOrCreate" "vgpuLock" "DirectoryOrCreate" "resctrl" "" -}}
{{- range $key := list "cgroup" "cdi" "vgpu" "vgpuLock" "resctrl" }}
{{- with index $paths $key }}
- name: host-{{ $key | lower }}
  path: {{ . }}
  type: {{ index $types $key | quote }}
{{- end }}
{{- end }}
{{- end -}}

{{/* Pod and container security: non-root, read-only root filesystem, no privileges (restricted PSS). */}}
{{- define "allot.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 10001
runAsGroup: 10001
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{/* The node agent's: root, to write the host's cgroup and resctrl files; still no privileges or capabilities. */}}
{{- define "allot.nodeAgentSecurityContext" -}}
runAsNonRoot: false
runAsUser: 0
runAsGroup: 0
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "allot.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
capabilities:
  drop: ["ALL"]
{{- end -}}

{{/* Probes: /healthz for liveness and startup (10 minutes for the schema and NATS); readiness on the path given. */}}
{{- define "allot.probes" -}}
startupProbe:
  httpGet:
    path: /healthz
    port: http
  periodSeconds: 5
  failureThreshold: 120
livenessProbe:
  httpGet:
    path: /healthz
    port: http
  periodSeconds: 10
  timeoutSeconds: 3
  failureThreshold: 3
readinessProbe:
  httpGet:
    path: {{ . }}
    port: http
  periodSeconds: 5
  timeoutSeconds: 3
  failureThreshold: 3
{{- end -}}

{{/* ALLOT_DATABASE_URL from the Secret. */}}
{{- define "allot.databaseEnv" -}}
- name: ALLOT_DATABASE_URL
  valueFrom:
    secretKeyRef:
      {{- include "allot.databaseSecret" . | nindent 6 }}
{{- end -}}


{{/*
The node agent reaches the host only through nodeAgent.hostPaths: every path qos-enforcer's config makes it write
(its defaults where config.qos-enforcer leaves them out) must be one of them or below one. A list of problems.
*/}}
{{- define "allot.nodeAgentChecks" -}}
{{- $config := index .Values.config "qos-enforcer" | default dict -}}
{{- $agent := $config.agent | default dict -}}
{{- $hami := $config.hamiCore | default dict -}}
{{- $paths := .Values.nodeAgent.hostPaths -}}
{{- $mounted := list -}}
{{- range $key := keys $paths | sortAlpha }}{{ with index $paths $key }}{{ $mounted = append $mounted (trimSuffix "/" .) }}{{ end }}{{ end -}}
{{- $used := dict
  "agent.cgroupFsRoot" ($agent.cgroupFsRoot | default "/sys/fs/cgroup")
  "agent.cdiSpecDir" ($agent.cdiSpecDir | default "/var/run/cdi")
  "hamiCore.libvgpuHostPath" ($hami.libvgpuHostPath | default "/usr/local/vgpu/libvgpu.so")
  "hamiCore.cacheHostDir" ($hami.cacheHostDir | default "/usr/local/vgpu/containers")
  "hamiCore.lockHostDir" ($hami.lockHostDir | default "/tmp/vgpulock") -}}
{{- if $paths.resctrl }}{{ $_ := set $used "agent.resctrlRoot" ($agent.resctrlRoot | default "/sys/fs/resctrl") }}{{ end -}}
{{- $problems := list -}}
{{- range $key := keys $used | sortAlpha -}}
{{- $path := toString (index $used $key) -}}
{{- $found := false -}}
{{- range $mounted }}{{ if or (eq $path .) (hasPrefix (printf "%s/" .) $path) }}{{ $found = true }}{{ end }}{{ end -}}
{{- if not $found -}}
{{- $problems = append $problems (printf "nodeAgent: config.qos-enforcer.%s is %s, which is not under any of nodeAgent.hostPaths (%s); mount it or change the config" $key $path (join ", " $mounted)) -}}
{{- end -}}
{{- end -}}
{{ toYaml $problems }}
{{- end -}}
