{{/* Labels every gpudra object carries. */}}
{{- define "gpudra.labels" -}}
app.kubernetes.io/name: gpudra
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The one gpudra image. */}}
{{- define "gpudra.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{/* The Service name of gpudra-controller (the webhook's default certificate names use it). */}}
{{- define "gpudra.controllerService" -}}
gpudra-controller
{{- end -}}

{{/* Refuse values that would install something broken, naming the value and what is accepted. */}}
{{- define "gpudra.validate" -}}
{{- $k := .Values.kubeletPlugin -}}
{{- range $p := (prepend $k.pools (dict "name" "" "nvml" $k.nvml "mig" $k.mig)) -}}
{{- $where := ternary "kubeletPlugin" (printf "kubeletPlugin.pools[%s]" $p.name) (eq $p.name "") -}}
{{- $nvml := $p.nvml | default $k.nvml -}}
{{- if not (or (eq $nvml "nvml") (hasPrefix "sim:" $nvml)) -}}
{{- fail (printf "%s.nvml=%q: accepted values are \"nvml\" or \"sim:<profile>\"" $where $nvml) -}}
{{- end -}}
{{- $mig := $p.mig | default $k.mig -}}
{{- if not (has $mig (list "static" "dynamic" "none")) -}}
{{- fail (printf "%s.mig=%q: accepted values are static, dynamic, none" $where $mig) -}}
{{- end -}}
{{- end -}}
{{- range $k.pools -}}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]{0,40}[a-z0-9])?$" (toString .name)) -}}
{{- fail (printf "kubeletPlugin.pools[].name=%q: must be a DNS label of at most 42 characters" (toString .name)) -}}
{{- end -}}
{{- end -}}
{{- if and $k.enabled (not $k.defaultPool) (not $k.pools) -}}
{{- fail "kubeletPlugin.defaultPool=false with no kubeletPlugin.pools: no node would run the plugin (set kubeletPlugin.enabled=false to install without it)" -}}
{{- end -}}
{{- if and .Values.topology.blocks .Values.topology.existingConfigMap -}}
{{- fail "topology.blocks and topology.existingConfigMap: set at most one" -}}
{{- end -}}
{{- if and .Values.webhook.certSecret (not (or .Values.webhook.caBundle .Values.webhook.annotations)) -}}
{{- fail "webhook.certSecret needs webhook.caBundle (or webhook.annotations for a CA injector such as cert-manager)" -}}
{{- end -}}
{{- end -}}
