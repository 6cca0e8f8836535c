{{/* Chart name, truncated to 63 characters (a DNS label). */}}
{{- define "hookkeeper.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Full name: <release>-<chart>, or the release name when it already contains the chart
name. Truncated to leave room for suffixes such as "-metrics".
*/}}
{{- define "hookkeeper.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 52 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 52 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "hookkeeper.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels of every object. */}}
{{- define "hookkeeper.labels" -}}
helm.sh/chart: {{ include "hookkeeper.chart" . }}
{{ include "hookkeeper.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: hookkeeper
{{- end -}}

{{/* Labels that select the operator pods; they never change across upgrades. */}}
{{- define "hookkeeper.selectorLabels" -}}
app.kubernetes.io/name: {{ include "hookkeeper.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: manager
{{- end -}}

{{- define "hookkeeper.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "hookkeeper.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The operator image: repository@digest, or repository:tag (appVersion by default). */}}
{{- define "hookkeeper.image" -}}
{{- if .Values.image.digest -}}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest -}}
{{- else -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}
{{- end -}}

{{/* The default receiver image: receiver.image, else the operator's own. */}}
{{- define "hookkeeper.receiverImage" -}}
{{- default (include "hookkeeper.image" .) .Values.receiver.image -}}
{{- end -}}

{{/* Runbook URL of an alert: the base plus the alert's heading anchor. */}}
{{- define "hookkeeper.runbook" -}}
{{- printf "%s#%s" .base (lower .alert) -}}
{{- end -}}
