{{/* The chart's name (nameOverride wins). */}}
{{- define "specdeploy.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The release's full name, the prefix of every object: fullnameOverride, else the release name
when it already contains the chart's name, else "<release>-<chart>". 63 characters at most
(a DNS label: some names become Service names).
*/}}
{{- define "specdeploy.fullname" -}}
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

{{- define "specdeploy.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels every object carries (Helm's and Kubernetes' recommended set) but the component,
which each object adds once: "specdeploy.labels" for the operator's own objects.
*/}}
{{- define "specdeploy.baseLabels" -}}
helm.sh/chart: {{ include "specdeploy.chart" . }}
app.kubernetes.io/name: {{ include "specdeploy.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: specdeploy
{{- end }}

{{- define "specdeploy.labels" -}}
{{ include "specdeploy.baseLabels" . }}
app.kubernetes.io/component: operator
{{- end }}

{{/* What the operator's Deployment and Service select on; never changes between upgrades. */}}
{{- define "specdeploy.selectorLabels" -}}
app.kubernetes.io/name: {{ include "specdeploy.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "specdeploy.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "specdeploy.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The operator image; the tag defaults to the chart's appVersion. */}}
{{- define "specdeploy.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* Whether the operator watches named namespaces only (the namespaced mode). */}}
{{- define "specdeploy.namespaced" -}}
{{- if .Values.watchNamespaces }}true{{ end }}
{{- end }}

{{/*
The Lease's namespace: leaderElection.namespace, else (namespaced mode) the first watched
namespace, whose generated Role grants the Lease, else the release namespace. Passed to the
operator explicitly so that it and the RBAC cannot disagree.
*/}}
{{- define "specdeploy.leaseNamespace" -}}
{{- if .Values.leaderElection.namespace }}
{{- .Values.leaderElection.namespace }}
{{- else if .Values.watchNamespaces }}
{{- first .Values.watchNamespaces }}
{{- else }}
{{- .Release.Namespace }}
{{- end }}
{{- end }}

{{/* Refusals the schema cannot express, named. */}}
{{- define "specdeploy.validate" -}}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.leaderElection.enabled) }}
{{- fail "replicaCount > 1 needs leaderElection.enabled: replicas without a leader would all act" }}
{{- end }}
{{- if and .Values.watchNamespaces .Values.leaderElection.enabled .Values.leaderElection.namespace (not (has .Values.leaderElection.namespace .Values.watchNamespaces)) }}
{{- fail (printf "leaderElection.namespace %q is not in watchNamespaces: only those namespaces' Roles grant the Lease" .Values.leaderElection.namespace) }}
{{- end }}
{{- if ne (len .Values.watchNamespaces) (len (uniq .Values.watchNamespaces)) }}
{{- fail "watchNamespaces lists a namespace twice" }}
{{- end }}
{{- end }}
