{{/* Labels every gpudra object carries. */}}
{{- define "gpudra.labels" -}}
app.kubernetes.io/name: gpudra
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{/* The image of a gpudra binary: <image.registry>/<binary>:<image.tag or appVersion>.
     Args: list of the root context and the binary. */}}
{{- define "gpudra.image" -}}
{{- $root := index . 0 -}}
{{ $root.Values.image.registry | trimSuffix "/" }}/{{ index . 1 }}:{{ $root.Values.image.tag | default $root.Chart.AppVersion }}
{{- end -}}

{{/* The Service name of gpudra-controller (the webhook's default certificate names use it). */}}
{{- define "gpudra.controllerService" -}}
gpudra-controller
{{- end -}}

{{/* Where gpudra's pods reach the API server when the cluster's Service address does not
     work for them (no kube-proxy, or a host-network pod before the node's proxy is up). */}}
{{- define "gpudra.apiServerEnv" -}}
{{- with .Values.kubernetesService.host }}
- name: KUBERNETES_SERVICE_HOST
  value: {{ . | quote }}
- name: KUBERNETES_SERVICE_PORT
  value: {{ required "kubernetesService.port: required with kubernetesService.host" $.Values.kubernetesService.port | toString | quote }}
{{- end }}
{{- end -}}

{{/* A numeric controller value as its flag's argument: empty when unset (null or ""), else the
     value checked (a number, an integer when .integer, at least .min when given), whole numbers
     written as integers (values files hold numbers as floats: 1e+06); anything else fails
     naming the value.
     Args: dict "key" (the value's path), "value", "integer", "min". */}}
{{- define "gpudra.flagNumber" -}}
{{- $v := .value -}}
{{- if not (or (kindIs "invalid" $v) (and (kindIs "string" $v) (eq $v ""))) -}}
{{- $what := ternary "an integer" "a number" (not (not .integer)) -}}
{{- if not (kindIs "invalid" .min) -}}{{- $what = printf "%s >= %v" $what .min -}}{{- end -}}
{{- $number := or (kindIs "int64" $v) (kindIs "int" $v) (kindIs "float64" $v) -}}
{{- if kindIs "string" $v -}}
{{- $number = regexMatch "^[-+]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][-+]?[0-9]+)?$" $v -}}
{{- end -}}
{{- if not $number -}}
{{- fail (printf "%s=%v: want %s" .key $v $what) -}}
{{- end -}}
{{- if and .integer (ne (float64 $v) (floor $v)) -}}
{{- fail (printf "%s=%v: want %s" .key $v $what) -}}
{{- end -}}
{{- if and (not (kindIs "invalid" .min)) (lt (float64 $v) (float64 .min)) -}}
{{- fail (printf "%s=%v: want %s" .key $v $what) -}}
{{- end -}}
{{- if eq (float64 $v) (floor $v) -}}{{ int64 (float64 $v) }}{{- else -}}{{ float64 $v }}{{- end -}}
{{- end -}}
{{- end -}}

{{/* gpudra-controller's flags from controller.kubeAPIQPS, kubeAPIBurst and
     admissionCheckWorkers: only those set, each checked. */}}
{{- define "gpudra.controllerTuningArgs" -}}
{{- $c := .Values.controller -}}
{{- with include "gpudra.flagNumber" (dict "key" "controller.kubeAPIQPS" "value" $c.kubeAPIQPS) }}
- --kube-api-qps={{ . }}
{{- end }}
{{- with include "gpudra.flagNumber" (dict "key" "controller.kubeAPIBurst" "value" $c.kubeAPIBurst "integer" true "min" 0) }}
- --kube-api-burst={{ . }}
{{- end }}
{{- with include "gpudra.flagNumber" (dict "key" "controller.admissionCheckWorkers" "value" $c.admissionCheckWorkers "integer" true "min" 1) }}
- --admission-check-workers={{ . }}
{{- end }}
{{- end -}}

{{/* Refuse values that would install something broken, naming the value and what is accepted. */}}
{{- define "gpudra.validate" -}}
{{- $k := .Values.kubeletPlugin -}}
{{- range $p := (prepend $k.pools (dict "name" "" "nvml" $k.nvml "kfd" $k.kfd "mig" $k.mig "publish" $k.publish "mpsControlDaemons" $k.mpsControlDaemons)) -}}
{{- $where := ternary "kubeletPlugin" (printf "kubeletPlugin.pools[%s]" $p.name) (eq $p.name "") -}}
{{- $nvml := $p.nvml | default $k.nvml -}}
{{- $kfd := $p.kfd | default $k.kfd | default "" -}}
{{- if not (or (eq $nvml "nvml") (eq $nvml "none") (hasPrefix "sim:" $nvml)) -}}
{{- fail (printf "%s.nvml=%q: accepted values are \"nvml\", \"sim:<profile>\" or \"none\" (with kfd set)" $where $nvml) -}}
{{- end -}}
{{- if not (or (eq $kfd "") (eq $kfd "sysfs") (hasPrefix "sim:" $kfd)) -}}
{{- fail (printf "%s.kfd=%q: accepted values are \"\", \"sysfs\" or \"sim:<profile>\"" $where $kfd) -}}
{{- end -}}
{{- if and (eq $nvml "none") (eq $kfd "") -}}
{{- fail (printf "%s.nvml=none publishes no GPU: set %s.kfd (sysfs or sim:<profile>)" $where $where) -}}
{{- end -}}
{{- $mig := $p.mig | default $k.mig -}}
{{- if not (has $mig (list "static" "dynamic" "none")) -}}
{{- fail (printf "%s.mig=%q: accepted values are static, dynamic, none" $where $mig) -}}
{{- end -}}
{{- $publish := $p.publish | default $k.publish | default "all" -}}
{{- if not (has $publish (list "all" "training" "whole")) -}}
{{- fail (printf "%s.publish=%q: accepted values are all, training, whole" $where $publish) -}}
{{- end -}}
{{- if and (ne $publish "all") (eq $mig "dynamic") -}}
{{- fail (printf "%s.publish=%s publishes no MIG devices: %s.mig must be static or none, not dynamic" $where $publish $where) -}}
{{- end -}}
{{- $mps := $p.mpsControlDaemons | default $k.mpsControlDaemons -}}
{{- if not (has $mps (list "pod" "process")) -}}
{{- fail (printf "%s.mpsControlDaemons=%q: accepted values are pod, process" $where $mps) -}}
{{- end -}}
{{- end -}}
{{- $poolKeys := concat (list "name" "nodeSelector" "tolerations") (without (keys $k) "pools" "defaultPool" "enabled") -}}
{{- range $pool := $k.pools -}}
{{- range $key, $_ := $pool -}}
{{- if not (has $key $poolKeys) -}}
{{- fail (printf "kubeletPlugin.pools[%s].%s: not a kubeletPlugin value; a pool may set %s" (toString $pool.name) $key (join ", " (sortAlpha $poolKeys))) -}}
{{- end -}}
{{- end -}}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9]{0,40}[a-z0-9])?$" (toString $pool.name)) -}}
{{- fail (printf "kubeletPlugin.pools[].name=%q: must be a DNS label of at most 42 characters" (toString $pool.name)) -}}
{{- end -}}
{{- end -}}
{{- if and $k.enabled (not $k.defaultPool) (not $k.pools) -}}
{{- fail "kubeletPlugin.defaultPool=false with no kubeletPlugin.pools: no node would run the plugin (set kubeletPlugin.enabled=false to install without it)" -}}
{{- end -}}
{{- $_ := include "gpudra.featureGatesArg" . -}}
{{- if and .Values.controller.enabled .Values.controller.dashboardPort -}}
{{- include "gpudra.requireGate" (dict "root" . "name" "WebView" "what" "controller.dashboardPort") -}}
{{- end -}}
{{- if .Values.kueue.admissionCheck -}}
{{- include "gpudra.requireGate" (dict "root" . "name" "TopologyAdmissionCheck" "what" "kueue.admissionCheck=true") -}}
{{- end -}}
{{- if .Values.webhook.hamiPods.enabled -}}
{{- include "gpudra.requireGate" (dict "root" . "name" "HAMiPods" "what" "webhook.hamiPods.enabled=true") -}}
{{- if not (and .Values.webhook.enabled .Values.controller.enabled) -}}
{{- fail "webhook.hamiPods.enabled=true needs webhook.enabled and controller.enabled: gpudra-controller serves it" -}}
{{- end -}}
{{- if and .Values.webhook.url (not .Values.webhook.hamiPods.url) -}}
{{- fail "webhook.url is set: set webhook.hamiPods.url too, the same server at path /mutate-hami-pods" -}}
{{- end -}}
{{- if not (or .Values.webhook.hamiPods.namespaceSelector .Values.webhook.hamiPods.objectSelector) -}}
{{- fail "webhook.hamiPods.enabled=true needs webhook.hamiPods.namespaceSelector or objectSelector: it rewrites only the pods of opted-in namespaces" -}}
{{- end -}}
{{- end -}}
{{- if and .Values.controller.enabled (include "gpudra.gateOn" (dict "root" . "name" "JobDependencies")) -}}
{{- if not .Values.webhook.enabled -}}
{{- fail "featureGates.JobDependencies needs webhook.enabled=true: its mutating webhook gates the Jobs that run after others" -}}
{{- end -}}
{{- if and .Values.webhook.url (not (hasSuffix "/validate-gpudra-config" .Values.webhook.url)) -}}
{{- fail (printf "webhook.url=%s: with featureGates.JobDependencies, want a URL ending in /validate-gpudra-config (the job dependencies' webhook is served beside it, at /mutate-gpudra-job-dependencies)" .Values.webhook.url) -}}
{{- end -}}
{{- end -}}
{{- $_ := include "gpudra.largeJobsFirstBands" . -}}
{{- $_ := include "gpudra.defragArgs" . -}}
{{- if and .Values.topology.blocks .Values.topology.existingConfigMap -}}
{{- fail "topology.blocks and topology.existingConfigMap: set at most one" -}}
{{- end -}}
{{- $_ := include "gpudra.controllerTuningArgs" . -}}
{{- $qps := include "gpudra.flagNumber" (dict "key" "controller.kubeAPIQPS" "value" .Values.controller.kubeAPIQPS) -}}
{{- if and $qps (eq (float64 $qps) 0.0) -}}
{{- fail "controller.kubeAPIQPS=0: client-go reads 0 as its default of 5 requests/s; leave it unset or negative for no client-side limit, or give a positive limit" -}}
{{- end -}}
{{- if and .Values.webhook.certSecret (not (or .Values.webhook.caBundle .Values.webhook.annotations)) -}}
{{- fail "webhook.certSecret needs webhook.caBundle (or webhook.annotations for a CA injector such as cert-manager)" -}}
{{- end -}}
{{- end -}}

{{- /* The kubelet plugin's LD_LIBRARY_PATH: the driver's library directories under the
       mounted driver root (/driver-root). The plugin hands the same value to its MPS
       control daemons' pods, and their admission policy allows that value only. */}}
{{- define "gpudra.pluginLibraryPath" -}}
/driver-root/usr/lib64:/driver-root/usr/lib/x86_64-linux-gnu:/driver-root/usr/lib/aarch64-linux-gnu
{{- end -}}

{{- /* gpudra's feature gates and their stages (internal/features; docs/feature-gates.md):
       alpha gates are off unless featureGates turns them on, beta gates on unless it turns
       them off. */}}
{{- define "gpudra.featureGateStages" -}}
ClaimUsage: beta
DataPrewarm: alpha
Defragmentation: alpha
DynamicMIG: alpha
HAMiCoreEnforcement: alpha
HAMiPods: alpha
JobDependencies: alpha
LargeJobsFirst: alpha
MIGLayouts: beta
MPSDaemonPods: beta
MemoryOversubscription: alpha
SharePriorityFromPods: alpha
TimeSlicing: beta
TopologyAdmissionCheck: beta
WebView: alpha
{{- end -}}

{{- /* Every component's --feature-gates: the gates featureGates names, sorted, each checked
       (a known gate, true or false); empty when it names none. */}}
{{- define "gpudra.featureGatesArg" -}}
{{- $stages := include "gpudra.featureGateStages" . | fromYaml -}}
{{- $known := concat (keys $stages | sortAlpha) (list "AllAlpha" "AllBeta") -}}
{{- $pairs := list -}}
{{- range $name := keys (.Values.featureGates | default dict) | sortAlpha -}}
{{- $on := get $.Values.featureGates $name -}}
{{- if not (has $name $known) -}}
{{- fail (printf "featureGates.%s: not a gpudra feature gate; known gates: %s" $name (join ", " $known)) -}}
{{- end -}}
{{- if not (kindIs "bool" $on) -}}
{{- fail (printf "featureGates.%s=%v: want true or false" $name $on) -}}
{{- end -}}
{{- $pairs = append $pairs (printf "%s=%t" $name $on) -}}
{{- end -}}
{{- with $pairs }}--feature-gates={{ join "," . }}{{ end -}}
{{- end -}}

{{- /* "true" when the gate .name is on (featureGates, AllAlpha, AllBeta, else its stage's
       default), else empty. Args: dict "root" (the chart's context), "name". */}}
{{- define "gpudra.gateOn" -}}
{{- $stage := get (include "gpudra.featureGateStages" .root | fromYaml) .name -}}
{{- $gates := .root.Values.featureGates | default dict -}}
{{- $on := eq $stage "beta" -}}
{{- if and (eq $stage "alpha") (hasKey $gates "AllAlpha") }}{{ $on = get $gates "AllAlpha" }}{{ end -}}
{{- if and (eq $stage "beta") (hasKey $gates "AllBeta") }}{{ $on = get $gates "AllBeta" }}{{ end -}}
{{- if hasKey $gates .name }}{{ $on = get $gates .name }}{{ end -}}
{{- if $on }}true{{ end -}}
{{- end -}}

{{- /* Fails unless the gate .name is on, saying that .what (the value asking for its
       behaviour) needs it. Args: dict "root" (the chart's context), "name", "what". */}}
{{- define "gpudra.requireGate" -}}
{{- $stage := get (include "gpudra.featureGateStages" .root | fromYaml) .name -}}
{{- if not (include "gpudra.gateOn" .) -}}
{{- fail (printf "%s requires featureGates.%s=true (%s%s)" .what .name $stage (ternary ", on by default" "" (eq $stage "beta"))) -}}
{{- end -}}
{{- end -}}

{{- /* --large-jobs-first-bands (minGPUs:priorityClass,...) when the controller runs the
       large jobs first policy (featureGates.LargeJobsFirst), else empty; fails naming the
       value for bands the controller would refuse or whose priorities would outrank the
       ones teams set themselves. */}}
{{- define "gpudra.largeJobsFirstBands" -}}
{{- if and .Values.controller.enabled (include "gpudra.gateOn" (dict "root" . "name" "LargeJobsFirst")) -}}
{{- if not .Values.webhook.enabled -}}
{{- fail "featureGates.LargeJobsFirst needs webhook.enabled=true: its mutating webhook gives new Jobs their band" -}}
{{- end -}}
{{- if and .Values.webhook.url (not (hasSuffix "/validate-gpudra-config" .Values.webhook.url)) -}}
{{- fail (printf "webhook.url=%s: with featureGates.LargeJobsFirst, want a URL ending in /validate-gpudra-config (the large jobs first webhook is served beside it, at /mutate-gpudra-large-jobs-first)" .Values.webhook.url) -}}
{{- end -}}
{{- $l := .Values.queueing.largeJobsFirst -}}
{{- if not $l.bands -}}
{{- fail "queueing.largeJobsFirst.bands is empty: with featureGates.LargeJobsFirst, give at least one band {minGPUs, priorityClass, value}" -}}
{{- end -}}
{{- if not (regexMatch "^([0-9]+h)?([0-9]+m)?([0-9]+s)?$" (toString $l.maxWait)) | or (eq (toString $l.maxWait) "") -}}
{{- fail (printf "queueing.largeJobsFirst.maxWait=%v: want a duration of at least 1m such as 1h or 30m" $l.maxWait) -}}
{{- end -}}
{{- $teams := list -}}
{{- if .Values.kueue.samples }}{{ range .Values.kueue.priorities }}{{ $teams = append $teams (int .value) }}{{ end }}{{ end -}}
{{- $pairs := list -}}
{{- $lastGPUs := 0 -}}
{{- $lastValue := 0 -}}
{{- range $k, $b := $l.bands -}}
{{- range $key, $_ := $b -}}
{{- if not (has $key (list "minGPUs" "priorityClass" "value")) -}}
{{- fail (printf "queueing.largeJobsFirst.bands[%d].%s: not a band field; a band has minGPUs, priorityClass and value" $k $key) -}}
{{- end -}}
{{- end -}}
{{- if not (and (regexMatch "^[0-9]+$" (toString $b.minGPUs)) (ge (int $b.minGPUs) 1)) -}}
{{- fail (printf "queueing.largeJobsFirst.bands[%d].minGPUs=%v: want a whole number of at least 1" $k $b.minGPUs) -}}
{{- end -}}
{{- if le (int $b.minGPUs) $lastGPUs -}}
{{- fail (printf "queueing.largeJobsFirst.bands[%d].minGPUs=%v: want bands by ascending minGPUs, above the band before's %d" $k $b.minGPUs $lastGPUs) -}}
{{- end -}}
{{- if not (regexMatch "^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$" (toString $b.priorityClass)) -}}
{{- fail (printf "queueing.largeJobsFirst.bands[%d].priorityClass=%q: want a WorkloadPriorityClass name (lower-case letters, digits, '-' and '.')" $k (toString $b.priorityClass)) -}}
{{- end -}}
{{- if not (and (regexMatch "^[0-9]+$" (toString $b.value)) (gt (int $b.value) $lastValue)) -}}
{{- fail (printf "queueing.largeJobsFirst.bands[%d].value=%v: want a whole number above 0 and above the band before's value (%d): larger jobs get higher priorities" $k $b.value $lastValue) -}}
{{- end -}}
{{- range $teams -}}
{{- if ge (int $b.value) . -}}
{{- fail (printf "queueing.largeJobsFirst.bands[%d].value=%v: want it below every kueue.priorities value (%d): a priority a team sets itself goes before a band" $k $b.value .) -}}
{{- end -}}
{{- end -}}
{{- $lastGPUs = int $b.minGPUs -}}
{{- $lastValue = int $b.value -}}
{{- $pairs = append $pairs (printf "%d:%s" (int $b.minGPUs) $b.priorityClass) -}}
{{- end -}}
{{- join "," $pairs -}}
{{- end -}}
{{- end -}}

{{- /* The controller's defragmentation flags when it moves pods (featureGates.Defragmentation,
       docs/defrag.md), else empty; fails naming the value that cannot work. */}}
{{- /* gpudra-controller's prewarm flags (featureGates.DataPrewarm), each checked; empty when
       the gate is off. */}}
{{- define "gpudra.prewarmArgs" -}}
{{- if and .Values.controller.enabled (include "gpudra.gateOn" (dict "root" . "name" "DataPrewarm")) -}}
{{- $v := .Values.prewarm.maxDataLoads -}}
{{- if not (and (regexMatch "^[0-9]+$" (toString $v)) (ge (int $v) 1)) -}}
{{- fail (printf "prewarm.maxDataLoads=%v: want a whole number of at least 1" $v) -}}
{{- end -}}
- --prewarm-max-dataloads={{ int $v }}
{{- end -}}
{{- end -}}

{{- define "gpudra.defragArgs" -}}
{{- if and .Values.controller.enabled (include "gpudra.gateOn" (dict "root" . "name" "Defragmentation")) -}}
{{- if not (include "gpudra.gateOn" (dict "root" . "name" "TopologyAdmissionCheck")) -}}
{{- fail "featureGates.Defragmentation needs featureGates.TopologyAdmissionCheck on: it plans for the Workloads that check keeps waiting" -}}
{{- end -}}
{{- $d := .Values.defrag -}}
{{- range $key := list "evictionsPerMinute" "maxEvictions" -}}
{{- $v := get $d $key -}}
{{- if not (and (regexMatch "^[0-9]+$" (toString $v)) (ge (int $v) 1)) -}}
{{- fail (printf "defrag.%s=%v: want a whole number of at least 1" $key $v) -}}
{{- end -}}
{{- end -}}
- --defrag-interval={{ $d.interval }}
- --defrag-evictions-per-minute={{ int $d.evictionsPerMinute }}
- --defrag-max-evictions={{ int $d.maxEvictions }}
{{- end -}}
{{- end -}}
