{{/*
Names and labels shared by every template. Names are cut to 63 characters
(the DNS-label limit most Kubernetes name fields have).
*/}}

{{- define "tfjob-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's objects' name: "<release>-tfjob-operator", or the release name when it already says so. */}}
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

{{- define "tfjob-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels that select the operator's pods; never change them in an upgrade (Deployment selectors are immutable). */}}
{{- define "tfjob-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tfjob-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
The `helm test` Pod's labels. Its name label differs from the operator's, so
no selector of the operator's (Deployment, Service, PodDisruptionBudget)
matches it: the ReplicaSet would otherwise adopt it.
*/}}
{{- define "tfjob-operator.testSelectorLabels" -}}
app.kubernetes.io/name: {{ include "tfjob-operator.name" . | trunc 58 | trimSuffix "-" }}-test
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "tfjob-operator.labels" -}}
helm.sh/chart: {{ include "tfjob-operator.chart" . }}
{{ include "tfjob-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/component: operator
app.kubernetes.io/part-of: tfjob-operator
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "tfjob-operator.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "tfjob-operator.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "tfjob-operator.leaderElectionId" -}}
{{- default (printf "%s-leader" (include "tfjob-operator.fullname" .)) .Values.leaderElection.id }}
{{- end }}

{{- define "tfjob-operator.image" -}}
{{- $tag := default .Chart.AppVersion .Values.image.tag }}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository $tag }}
{{- end }}
{{- end }}

{{/* gangScheduling as the flag spells it: YAML 1.1 reads a bare on/off as a boolean. */}}
{{- define "tfjob-operator.gangScheduling" -}}
{{- $v := .Values.gangScheduling -}}
{{- if kindIs "bool" $v -}}{{ ternary "on" "off" $v }}{{- else -}}{{ $v }}{{- end -}}
{{- end }}

{{/* kueue.mode as the flag spells it: YAML 1.1 reads a bare off as a boolean. */}}
{{- define "tfjob-operator.kueueMode" -}}
{{- $kueue := .Values.kueue | default dict -}}
{{- $v := ternary $kueue.mode "auto" (hasKey $kueue "mode") -}}
{{- if kindIs "bool" $v -}}{{ ternary "workload" "off" $v }}{{- else -}}{{ $v }}{{- end -}}
{{- end }}

{{/* Whether the operator may own Kueue Workloads (kueue.mode auto or workload). */}}
{{- define "tfjob-operator.kueueWorkloads" -}}
{{- if has (include "tfjob-operator.kueueMode" .) (list "auto" "workload") }}true{{ end -}}
{{- end }}

{{/*
What the operator does in the namespaces it watches, and nothing else
(rendered into a ClusterRole, or a Role when watchNamespace is set):
- TFJobs: read and watch; delete for ttlSecondsAfterFinished; status
  written with a full update (compare-and-swap on resourceVersion).
  `tfjobs/finalizers` update: children carry a controller ownerReference with
  blockOwnerDeletion, which clusters running the
  OwnerReferencesPermissionEnforcement admission plugin only allow to
  principals that may update the owner's finalizers.
- Pods and Services: the children. patch is for adopting orphans and
  releasing children whose labels no longer match (ownerReferences).
- Events: the recorder creates, then patches the count of repeated events.
Leases (leader election) are a separate Role in the release namespace.
*/}}
{{- define "tfjob-operator.rules" -}}
- apiGroups: ["kubeflow.org"]
  resources: ["tfjobs"]
  # patch: the bookkeeping annotation (restarts, succeeded indexes), which
  # Kubeflow's CRD would prune from status.
  verbs: ["get", "list", "watch", "delete", "patch"]
- apiGroups: ["kubeflow.org"]
  resources: ["tfjobs/status"]
  verbs: ["get", "update"]
- apiGroups: ["kubeflow.org"]
  resources: ["tfjobs/finalizers"]
  verbs: ["update"]
- apiGroups: [""]
  resources: ["pods", "services"]
  verbs: ["get", "list", "watch", "create", "delete", "patch"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- if ne (include "tfjob-operator.gangScheduling" .) "off" }}
# The PodGroup each ganged job's Pods join: created before the Pods, minCount
# patched on scaling, deleted on suspend. No update, no status: the scheduler
# writes that.
- apiGroups: ["scheduling.k8s.io"]
  resources: ["podgroups"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
{{- end }}
{{- if include "tfjob-operator.kueueWorkloads" . }}
# The Kueue Workload of each queued job (--kueue=auto|workload,
# src/tfjob/kueue/): created, deleted when the job changes before admission,
# patched for its queue name and Kueue's finalizer; its status applied
# (server-side apply is a patch). No update: nothing is replaced whole.
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["workloads"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
- apiGroups: ["kueue.x-k8s.io"]
  resources: ["workloads/status"]
  verbs: ["patch"]
{{- end }}
{{- end }}

{{- define "tfjob-operator.testImage" -}}
{{- with .Values.test.image }}
{{- if .digest }}
{{- printf "%s@%s" .repository .digest }}
{{- else }}
{{- printf "%s:%s" .repository .tag }}
{{- end }}
{{- end }}
{{- end }}
