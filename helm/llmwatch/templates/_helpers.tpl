{{/* Chart name, truncated to the 63 characters of a DNS label. */}}
{{- define "llmwatch.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name: release-chart unless the release name already contains the chart name. */}}
{{- define "llmwatch.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "llmwatch.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "llmwatch.selectorLabels" -}}
app.kubernetes.io/name: {{ include "llmwatch.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "llmwatch.labels" -}}
helm.sh/chart: {{ include "llmwatch.chart" . }}
{{ include "llmwatch.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: llmwatch
{{- end }}

{{- define "llmwatch.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "llmwatch.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "llmwatch.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/*
The proxy container's image. When the scorer Deployment does the scoring (kafka.enabled, and the
user did not switch in-process scoring back on), the proxy needs no torch and no embedding model:
it runs the slim image (Dockerfile --build-arg EXTRAS=kafka,otel), paid for in every pod.
*/}}
{{- define "llmwatch.proxySlim" -}}
{{- $inProcessScoring := true }}
{{- if .Values.kafka.enabled }}
{{- $inProcessScoring = false }}
{{- with .Values.config.scoring }}{{- if hasKey . "enabled" }}{{- $inProcessScoring = .enabled }}{{- end }}{{- end }}
{{- end }}
{{- if not $inProcessScoring }}true{{- end }}
{{- end }}

{{- define "llmwatch.proxyImage" -}}
{{- if not (include "llmwatch.proxySlim" .) }}
{{- include "llmwatch.image" . }}
{{- else }}
{{- $tag := default .Chart.AppVersion .Values.image.tag }}
{{- printf "%s:%s" (default .Values.image.repository .Values.slimImage.repository) (default (printf "%s-slim" $tag) .Values.slimImage.tag) }}
{{- end }}
{{- end }}

{{/* The URL llmwatch forwards to. */}}
{{- define "llmwatch.upstream" -}}
{{- if eq .Values.mode "sidecar" }}
{{- if not .Values.app.image.repository }}
{{- fail "mode=sidecar needs app.image.repository: the LLM server container llmwatch sits in front of (or use mode=standalone with upstream.url)" }}
{{- end }}
{{- printf "http://127.0.0.1:%v" .Values.app.port }}
{{- else if eq .Values.mode "standalone" }}
{{- required "mode=standalone needs upstream.url, the URL of the existing LLM Service (e.g. http://vllm.ns.svc:8000)" .Values.upstream.url }}
{{- else }}
{{- fail (printf "mode must be sidecar or standalone, not %q" .Values.mode) }}
{{- end }}
{{- end }}

{{/* Settings the chart manages in llmwatch's config (ports must match the probes and Services). */}}
{{- define "llmwatch.managedConfig" -}}
{{- /* Containers of one pod share its network: two on one port cannot both bind, and in sidecar
mode an app.port equal to llmwatch.port would have llmwatch forward to itself. */}}
{{- $ports := list (list "llmwatch.port" .Values.llmwatch.port) (list "llmwatch.metricsPort" .Values.llmwatch.metricsPort) }}
{{- if eq .Values.mode "sidecar" }}
{{- $ports = prepend $ports (list "app.port" .Values.app.port) }}
{{- end }}
{{- range $i, $a := $ports }}
{{- range $b := slice $ports (add1 $i) }}
{{- if eq (int (index $a 1)) (int (index $b 1)) }}
{{- fail (printf "%s and %s are both %v: containers of one pod need different ports" (index $a 0) (index $b 0) (index $a 1)) }}
{{- end }}
{{- end }}
{{- end }}
{{- if eq (int .Values.service.port) (int .Values.service.metricsPort) }}
{{- fail (printf "service.port and service.metricsPort are both %v: a Service needs different ports" .Values.service.port) }}
{{- end }}
listen: {{ printf "0.0.0.0:%v" .Values.llmwatch.port | quote }}
metrics_listen: {{ printf "0.0.0.0:%v" .Values.llmwatch.metricsPort | quote }}
data_dir: {{ .Values.dataDir.path | quote }}
{{- if .Values.kafka.enabled }}
{{- if not .Values.kafka.bootstrapServers }}
{{- fail "kafka.enabled needs kafka.bootstrapServers (HOST:PORT of the brokers)" }}
{{- end }}
kafka:
  enabled: true
  bootstrap_servers: {{ toJson .Values.kafka.bootstrapServers }}
  samples_topic: {{ .Values.kafka.topic | quote }}
  group_id: {{ .Values.kafka.group | quote }}
{{- end }}
{{- end }}

{{/*
llmwatch's YAML config for the proxy (role "proxy") or the Kafka scorer workers (role "scorer"):
the user's .Values.config, with in-process scoring off in the proxy when Kafka carries the samples
(unless config.scoring.enabled is set), then the chart-managed settings on top.
*/}}
{{- define "llmwatch.config" -}}
{{- $root := index . 0 }}
{{- $role := index . 1 }}
{{- $defaults := dict }}
{{- if and $root.Values.kafka.enabled (eq $role "proxy") }}
{{- $_ := set $defaults "scoring" (dict "enabled" false) }}
{{- end }}
{{- $managed := include "llmwatch.managedConfig" $root | fromYaml }}
{{- if eq $role "proxy" }}
{{- $_ := set $managed "upstream" (include "llmwatch.upstream" $root) }}
{{- end }}
{{- $config := mustMergeOverwrite $defaults (deepCopy $root.Values.config) $managed }}
{{- toYaml $config }}
{{- end }}

{{/* Volumes and mounts every llmwatch container uses: config (read-only), data dir, /tmp. */}}
{{- define "llmwatch.volumeMounts" -}}
- name: config
  mountPath: /etc/llmwatch
  readOnly: true
- name: data
  mountPath: {{ .Values.dataDir.path }}
- name: tmp
  mountPath: /tmp
{{- end }}

{{- define "llmwatch.volumes" -}}
- name: config
  configMap:
    name: {{ include "llmwatch.fullname" . }}
- name: data
  emptyDir:
    {{- with .Values.dataDir.medium }}
    medium: {{ . }}
    {{- end }}
    sizeLimit: {{ .Values.dataDir.sizeLimit }}
- name: tmp
  emptyDir:
    sizeLimit: 512Mi
{{- end }}

{{/*
The prometheus-operator objects need their CRD in the cluster: without it the API server refuses
the object and with it the whole install or upgrade. Rendered only where the CRD is known
(.Capabilities.APIVersions: the cluster's own on install/upgrade, --api-versions for helm
template), and an error that says so where it is switched on but absent: a monitor that is
silently not created reads as "installed" while nothing is scraped.
*/}}
{{- define "llmwatch.requireOperatorCRD" -}}
{{- $root := index . 0 }}
{{- $kind := index . 1 }}
{{- $switch := index . 2 }}
{{- if not ($root.Capabilities.APIVersions.Has (printf "monitoring.coreos.com/v1/%s" $kind)) }}
{{- fail (printf "%s=true but this cluster has no %s CRD (monitoring.coreos.com/v1/%s, from the prometheus-operator or kube-prometheus-stack): install the operator's CRDs first, or set %s=false. Rendering without a cluster (helm template, Argo CD), pass --api-versions monitoring.coreos.com/v1/%s" $switch $kind $kind $switch $kind) }}
{{- end }}
{{- end }}
