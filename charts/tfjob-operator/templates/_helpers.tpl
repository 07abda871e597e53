{{/* The chart name, or nameOverride. */}}
{{- define "tfjob-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The name of every resource: fullnameOverride, else <release>-<chart>, else just the release
name when it already contains the chart name (a release called "tfjob-operator").
*/}}
{{- define "tfjob-operator.fullname" -}}
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

{{/* chart-version, for the helm.sh/chart label. */}}
{{- define "tfjob-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels that select the operator pod; they never change across upgrades. */}}
{{- define "tfjob-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tfjob-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Labels on every resource. */}}
{{- define "tfjob-operator.labels" -}}
helm.sh/chart: {{ include "tfjob-operator.chart" . }}
{{ include "tfjob-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: operator
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/* The ServiceAccount the operator runs as. */}}
{{- define "tfjob-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "tfjob-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* repository:tag, the tag defaulting to the chart's appVersion. */}}
{{- define "tfjob-operator.image" -}}
{{- printf "%s:%s" .Values.image.repository (toString (.Values.image.tag | default .Chart.AppVersion)) }}
{{- end }}

{{/*
Whether the operator serves Kubeflow's group (apiGroup: kubeflow.org) rather than tfjob.dev.
*/}}
{{- define "tfjob-operator.kubeflow" -}}
{{- if eq .Values.apiGroup "kubeflow.org" }}true{{ end }}
{{- end }}

{{/*
Every RBAC rule of the operator (generated from tfjob_operator/api/rbac.py): the TFJob rules of
the group it serves (files/job-rules*.yaml), then the rest (files/rules.yaml). A YAML list.
*/}}
{{- define "tfjob-operator.allRules" -}}
{{- $jobs := ternary "files/job-rules-kubeflow.yaml" "files/job-rules.yaml" (eq (include "tfjob-operator.kubeflow" .) "true") }}
{{- $rules := concat (.Files.Get $jobs | fromYamlArray) (.Files.Get "files/rules.yaml" | fromYamlArray) }}
{{- if .Values.kueue.enabled }}
{{- $rules = concat $rules (.Files.Get "files/kueue-rules.yaml" | fromYamlArray) (.Files.Get "files/kueue-cluster-rules.yaml" | fromYamlArray) }}
{{- end }}
{{- toYaml $rules }}
{{- end }}

{{/*
The operator's RBAC rules (tfjob-operator.allRules), split
into those on cluster-scoped resources, which only a ClusterRole can grant, and the rest,
which a Role in each watched namespace grants. Returns YAML: {cluster: [...], namespaced: [...]}.
*/}}
{{- define "tfjob-operator.rules" -}}
{{- $clusterScoped := list "customresourcedefinitions" "namespaces" "resourceflavors" "workloadpriorityclasses" "priorityclasses" "clusterqueues" "admissionchecks" }}
{{- $cluster := list }}
{{- $namespaced := list }}
{{- range (include "tfjob-operator.allRules" . | fromYamlArray) }}
{{- $isCluster := false }}
{{- range .resources }}
{{- if has (splitList "/" . | first) $clusterScoped }}
{{- $isCluster = true }}
{{- end }}
{{- end }}
{{- if $isCluster }}
{{- $cluster = append $cluster . }}
{{- else }}
{{- $namespaced = append $namespaced . }}
{{- end }}
{{- end }}
{{- toYaml (dict "cluster" $cluster "namespaced" $namespaced) }}
{{- end }}

{{/* The leader-election Lease, one per release. */}}
{{- define "tfjob-operator.leaseName" -}}
{{- printf "%s-leader" (include "tfjob-operator.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}
