// Package helm holds entityflow's Helm chart (entityflow/: the worker, the
// bus ingress, the HTTP API, their PodDisruptionBudgets, Services,
// ServiceMonitors and a KEDA ScaledObject per Worker Deployment version) and
// its tests, which render it with Helm's Go packages for several value sets
// and check every object: against Kubernetes' OpenAPI schemas and KEDA's CRDs
// (kubeconform, strict), the ServiceMonitors against the Prometheus
// Operator's types, the KEDA triggers against the keys KEDA's Temporal scaler
// reads, every environment variable and flag against the programs' -h, and
// the invariants between the objects (selectors, ports, grace periods). The
// package has no Go code of its own: the chart is what Helm installs
// (docs/kubernetes.md).
package helm
