{{/* The chart's checks, and what every proxy shares. */}}

{{- define "skywalker.validate" -}}
{{- if not (regexMatch "^[a-z0-9][a-z0-9-]*$" (required "set region, e.g. --set region=us-east" .Values.region)) -}}
{{- fail "region must be lower-case letters, digits and dashes" -}}
{{- end -}}
{{- $_ := required "set image.repository to the image you built and pushed (README: Deployment)" .Values.image.repository -}}
{{- if not (or .Values.pool .Values.modelPools) -}}
{{- fail "set pool to the region's replicas (URLs, or one headless Service name), or list them per model in modelPools" -}}
{{- end -}}
{{- if not (or .Values.gossip.existingSecret .Values.gossip.key) -}}
{{- fail "set gossip.existingSecret or gossip.key: the mesh is encrypted, with the same key in every region" -}}
{{- end -}}
{{- if not (or .Values.forwarding.tlsSecret .Values.forwarding.insecure) -}}
{{- fail "set forwarding.tlsSecret (a Secret with tls.crt, tls.key and ca.crt) or forwarding.insecure: regions forward prompts to each other" -}}
{{- end -}}
{{- if eq .Values.mesh.exposure "loadBalancer" -}}
{{- if not .Values.mesh.addresses -}}
{{- fail "mesh.exposure loadBalancer needs mesh.addresses: one reserved address per proxy" -}}
{{- end -}}
{{- else if ne .Values.mesh.exposure "cluster" -}}
{{- fail "mesh.exposure must be cluster or loadBalancer" -}}
{{- end -}}
{{- end -}}

{{- define "skywalker.labels" -}}
app.kubernetes.io/name: skywalker
app.kubernetes.io/instance: {{ .Release.Name }}
skywalker.io/region: {{ .Values.region }}
{{- end -}}

{{- define "skywalker.secretName" -}}
{{- .Values.gossip.existingSecret | default (printf "%s-gossip" .Release.Name) -}}
{{- end -}}

{{- define "skywalker.peers" -}}
{{- $peers := list -}}
{{- range .Values.peers -}}
{{- $peers = append $peers (printf "%s:%s" .region .url) -}}
{{- end -}}
{{- join "," $peers -}}
{{- end -}}

{{- define "skywalker.modelPools" -}}
{{- $pairs := list -}}
{{- range $model, $urls := .Values.modelPools -}}
{{- $pairs = append $pairs (printf "%s=%s" $model (join "," $urls)) -}}
{{- end -}}
{{- join ";" $pairs -}}
{{- end -}}

{{- define "skywalker.modelProfiles" -}}
{{- $pairs := list -}}
{{- range $model, $p := .Values.modelProfiles -}}
{{- $pairs = append $pairs (printf "%s=%s" $model $p) -}}
{{- end -}}
{{- join "," $pairs -}}
{{- end -}}

{{- define "skywalker.peerJurisdictions" -}}
{{- $pairs := list -}}
{{- range $region, $j := .Values.peerJurisdictions -}}
{{- $pairs = append $pairs (printf "%s=%s" $region $j) -}}
{{- end -}}
{{- join "," $pairs -}}
{{- end -}}

{{/* The pod template; dict with root, name, and advertise (an address, or "" for the pod IP). */}}
{{- define "skywalker.pod" -}}
{{- $root := .root -}}
metadata:
  labels:
    {{- include "skywalker.labels" $root | nindent 4 }}
    skywalker.io/proxy: {{ .name }}
  annotations:
    prometheus.io/scrape: "true"
    prometheus.io/port: "9100"
    prometheus.io/path: /metrics
spec:
  terminationGracePeriodSeconds: {{ add $root.Values.preStopSeconds $root.Values.drainSeconds 10 }}
  securityContext:
    runAsNonRoot: true
    runAsUser: 65532
  containers:
    - name: skywalker
      image: "{{ $root.Values.image.repository }}:{{ $root.Values.image.tag | default $root.Chart.AppVersion }}"
      imagePullPolicy: {{ $root.Values.image.pullPolicy }}
      args: [serve]
      ports:
        - {name: http, containerPort: 9000, protocol: TCP}
        - {name: admin, containerPort: 9100, protocol: TCP}
        {{- if $root.Values.forwarding.tlsSecret }}
        - {name: peer, containerPort: 9443, protocol: TCP}
        {{- end }}
        - {name: gossip-tcp, containerPort: 7946, protocol: TCP}
        - {name: gossip-udp, containerPort: 7946, protocol: UDP}
      env:
        - {name: POD_IP, valueFrom: {fieldRef: {fieldPath: status.podIP}}}
        # The Go runtime collects harder as the heap nears the container's
        # memory limit, instead of being killed past it.
        - {name: GOMEMLIMIT, valueFrom: {resourceFieldRef: {resource: limits.memory}}}
        - {name: SKYWALKER_NODE_ID, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
        - {name: REGION_ID, value: {{ $root.Values.region | quote }}}
        {{- with $root.Values.jurisdiction }}
        - {name: SKYWALKER_JURISDICTION, value: {{ . | quote }}}
        {{- end }}
        {{- with include "skywalker.peers" $root }}
        - {name: PEER_REGIONS, value: {{ . | quote }}}
        {{- end }}
        {{- with include "skywalker.peerJurisdictions" $root }}
        - {name: SKYWALKER_PEER_JURISDICTIONS, value: {{ . | quote }}}
        {{- end }}
        {{- with $root.Values.pool }}
        - {name: LOCAL_WORKER_POOL, value: {{ . | quote }}}
        {{- end }}
        {{- with include "skywalker.modelPools" $root }}
        - {name: SKYWALKER_MODEL_POOLS, value: {{ . | quote }}}
        {{- end }}
        {{- with include "skywalker.modelProfiles" $root }}
        - {name: SKYWALKER_MODEL_PROFILES, value: {{ . | quote }}}
        {{- end }}
        - {name: SKYWALKER_LORA_LOAD_TIME, value: {{ $root.Values.loraLoadTime | quote }}}
        - {name: SKYWALKER_KV_EVENTS, value: {{ $root.Values.kvEvents | quote }}}
        - {name: MAX_WAN_RTT_THRESHOLD_MS, value: {{ $root.Values.mesh.maxWanRttMs | quote }}}
        - {name: SKYWALKER_MESH_PRESET, value: {{ $root.Values.mesh.preset | quote }}}
        - {name: SKYWALKER_LISTEN, value: ":9000"}
        - {name: SKYWALKER_ADMIN_LISTEN, value: ":9100"}  # /metrics for Prometheus; no Service exposes it
        - {name: SKYWALKER_GOSSIP_BIND, value: ":7946"}
        {{- $peerURL := "http://%s:9000" }}
        {{- if $root.Values.forwarding.tlsSecret }}
        {{- $peerURL = "https://%s:9443" }}
        - {name: SKYWALKER_PEER_LISTEN, value: ":9443"}
        - {name: SKYWALKER_TLS_CERT, value: /etc/skywalker/tls/tls.crt}
        - {name: SKYWALKER_TLS_KEY, value: /etc/skywalker/tls/tls.key}
        - {name: SKYWALKER_TLS_CA, value: /etc/skywalker/tls/ca.crt}
        {{- else }}
        - {name: SKYWALKER_INSECURE_FORWARDING, value: "true"}
        {{- end }}
        {{- if .advertise }}
        - {name: SKYWALKER_GOSSIP_ADVERTISE, value: {{ printf "%s:7946" .advertise | quote }}}
        - {name: SKYWALKER_ADVERTISE_URL, value: {{ printf $peerURL .advertise | quote }}}
        {{- else }}
        - {name: SKYWALKER_GOSSIP_ADVERTISE, value: "$(POD_IP):7946"}
        - {name: SKYWALKER_ADVERTISE_URL, value: {{ printf $peerURL "$(POD_IP)" | quote }}}
        {{- end }}
        - {name: SKYWALKER_POLICY, value: {{ $root.Values.policy | quote }}}
        - {name: SKYWALKER_PROFILE, value: {{ $root.Values.profile | quote }}}
        - {name: SKYWALKER_MAX_IN_FLIGHT, value: {{ $root.Values.maxInFlight | quote }}}
        - {name: SKYWALKER_DRAIN_TIMEOUT, value: {{ printf "%ds" (int $root.Values.drainSeconds) | quote }}}
        - name: SKYWALKER_GOSSIP_KEY
          valueFrom:
            secretKeyRef: {name: {{ include "skywalker.secretName" $root }}, key: key}
        {{- with $root.Values.env }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      {{- if $root.Values.forwarding.tlsSecret }}
      volumeMounts:
        - {name: forwarding-tls, mountPath: /etc/skywalker/tls, readOnly: true}
      {{- end }}
      lifecycle:
        preStop:
          sleep: {seconds: {{ $root.Values.preStopSeconds }}}
      readinessProbe:
        httpGet: {path: /ready, port: http}
        periodSeconds: 2
      livenessProbe:
        httpGet: {path: /health, port: http}
        periodSeconds: 10
      resources:
        {{- toYaml $root.Values.resources | nindent 8 }}
  {{- with $root.Values.forwarding.tlsSecret }}
  volumes:
    - name: forwarding-tls
      secret: {secretName: {{ . }}}
  {{- end }}
{{- end -}}
