{{/*
The chart's name (nameOverride wins): the value of app.kubernetes.io/name.
*/}}
{{- define "sample-controller.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The prefix of every object's name, as `helm create` builds it: fullnameOverride, else the
release name when it already contains the chart's name (release "sample-controller" gives
"sample-controller", the kustomize manifests' names), else "<release>-<chart>".
*/}}
{{- define "sample-controller.fullname" -}}
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

{{/*
chart label value: name-version.
*/}}
{{- define "sample-controller.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The labels of every object: the selector labels, then Helm's release labels.
*/}}
{{- define "sample-controller.labels" -}}
{{ include "sample-controller.selectorLabels" . }}
helm.sh/chart: {{ include "sample-controller.chart" . }}
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
Selector labels: which pods a Deployment, StatefulSet or Service selects.
*/}}
{{- define "sample-controller.selectorLabels" -}}
app.kubernetes.io/name: {{ include "sample-controller.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
The ServiceAccount the manager's pods (and the shards) run as.
*/}}
{{- define "sample-controller.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "sample-controller.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
The container image: repository:tag, the tag defaulting to the chart's appVersion.
*/}}
{{- define "sample-controller.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion (toString .Values.image.tag)) }}
{{- end }}

{{/*
The flags every process of the chart (leader, shard, sharder) shares after its role's own:
metrics, probes, logging, then the user's extraArgs.
*/}}
{{- define "sample-controller.commonArgs" -}}
{{- if .Values.metrics.enabled }}
- --metrics-bind-address=:{{ .Values.metrics.port }}
{{- if .Values.metrics.secure }}
- --metrics-secure
{{- end }}
{{- else }}
- --metrics-bind-address=0
{{- end }}
{{- if .Values.probes.enabled }}
- --health-probe-bind-address=:{{ .Values.probes.port }}
{{- else }}
- --health-probe-bind-address=0
{{- end }}
{{- end }}

{{/*
What the operators watch: --controllers (when not every one), --namespace, --workers.
*/}}
{{- define "sample-controller.scopeArgs" -}}
{{- if ne (join "," .Values.controllers) "*" }}
- --controllers={{ join "," .Values.controllers }}
{{- end }}
{{- if .Values.watchNamespace }}
- --namespace={{ .Values.watchNamespace }}
{{- end }}
{{- if .Values.workers }}
- --workers={{ .Values.workers }}
{{- end }}
{{- end }}

{{/*
Logging flags and extraArgs: the tail of every process's arguments.
*/}}
{{- define "sample-controller.tailArgs" -}}
- --log-format={{ .Values.logging.format }}
{{- if gt (int .Values.logging.verbosity) 0 }}
- --v={{ .Values.logging.verbosity }}
{{- end }}
{{- range .Values.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end }}

{{/*
The container ports shared by every process: metrics (when served) and probes.
*/}}
{{- define "sample-controller.ports" -}}
{{- if .Values.metrics.enabled }}
- name: metrics
  containerPort: {{ .Values.metrics.port }}
  protocol: TCP
{{- end }}
{{- if .Values.probes.enabled }}
- name: probes
  containerPort: {{ .Values.probes.port }}
  protocol: TCP
{{- end }}
{{- end }}

{{/*
The container's probes (when served): livenessProbe and readinessProbe.
*/}}
{{- define "sample-controller.probes" -}}
{{- if .Values.probes.enabled }}
{{- with .Values.livenessProbe }}
livenessProbe:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with .Values.readinessProbe }}
readinessProbe:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- end }}
{{- end }}

{{/*
The env every process gets: POD_NAMESPACE (the Lease namespace), then extraEnv.
*/}}
{{- define "sample-controller.env" -}}
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end }}

{{/*
The webhook serving Secret's name.
*/}}
{{- define "sample-controller.webhookSecretName" -}}
{{- if .Values.webhook.certManager.enabled }}
{{- printf "%s-webhook-cert" (include "sample-controller.fullname" .) }}
{{- else }}
{{- required "webhook.secretName is required when webhook.certManager.enabled is false" .Values.webhook.secretName }}
{{- end }}
{{- end }}
