package main

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/entityflow/entityflow/internal/testkit/jaeger"
)

// The OpenTelemetry SDK's standard environment variables that devrun sets
// for the worker and the API it starts, or leaves to the environment.
const (
	otlpEndpointEnv = "OTEL_EXPORTER_OTLP_ENDPOINT"
	otlpTracesEnv   = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
	serviceNameEnv  = "OTEL_SERVICE_NAME"
	sdkDisabledEnv  = "OTEL_SDK_DISABLED"
)

// The service names of make run's programs in the trace viewer.
const (
	workerService = "entityflow-worker"
	apiService    = "entityflow-api"
)

// viewerHint tells what to do when make run has no trace viewer to start.
const viewerHint = "to see traces, point " + otlpEndpointEnv + " at an OTLP/HTTP receiver, " +
	"e.g. " + otlpEndpointEnv + "=http://127.0.0.1:4318 with `docker run --rm -p 16686:16686 -p 4318:4318 jaegertracing/jaeger:2.13.0` (its UI on http://127.0.0.1:16686)"

// tracePlan is where the traces of make run's worker and API go.
type tracePlan struct {
	// endpoint is the OTEL_EXPORTER_OTLP_ENDPOINT devrun gives the
	// programs; empty leaves their environment as it is.
	endpoint string
	// start says devrun starts bin/jaeger on the default addresses.
	start bool
	// ui is the trace viewer's UI, empty when devrun knows none.
	ui string
	// query is the query API of the bin/jaeger devrun starts, which has
	// no UI (the module proxy carries no compiled UI assets).
	query string
	// note is what devrun prints about it.
	note string
}

// planTraces decides where traces go: where the environment already sends
// them (OTEL_EXPORTER_OTLP_ENDPOINT, or nowhere under OTEL_SDK_DISABLED),
// else to an OTLP receiver already listening on 127.0.0.1:4318, else to
// bin/jaeger, which devrun then starts; without it, nowhere, with a hint.
func planTraces(getenv func(string) string, listening func(string) bool, binary func() (string, error)) tracePlan {
	if off, err := strconv.ParseBool(getenv(sdkDisabledEnv)); err == nil && off {
		return tracePlan{note: sdkDisabledEnv + "=true: the worker and the API send no traces"}
	}
	for _, env := range []string{otlpTracesEnv, otlpEndpointEnv} {
		if v := getenv(env); v != "" {
			return tracePlan{note: fmt.Sprintf("the worker and the API send traces to %s (%s)", v, env)}
		}
	}
	endpoint := "http://" + jaeger.DefaultOTLPHTTP
	ui := ""
	if listening(jaeger.DefaultQueryHTTP) {
		ui = "http://" + jaeger.DefaultQueryHTTP
	}
	if listening(jaeger.DefaultOTLPHTTP) {
		return tracePlan{endpoint: endpoint, ui: ui, note: "the worker and the API send traces to the OTLP receiver already listening on " + jaeger.DefaultOTLPHTTP}
	}
	bin, err := binary()
	if err != nil {
		return tracePlan{note: "no trace viewer (bin/jaeger is missing; make tools builds it): " + viewerHint}
	}
	return tracePlan{endpoint: endpoint, start: true, query: "http://" + jaeger.DefaultQueryHTTP,
		note: fmt.Sprintf("starting the trace store (%s): query API on %s, OTLP on %s (traces kept in memory until Ctrl-C)", bin, jaeger.DefaultQueryHTTP, jaeger.DefaultOTLPHTTP)}
}

// env returns the variables a program of service name gets on top of
// devrun's environment: the plan's endpoint, and its service name unless
// OTEL_SERVICE_NAME names one for every program.
func (p tracePlan) env(getenv func(string) string, service string) []string {
	var env []string
	if p.endpoint != "" {
		env = append(env, otlpEndpointEnv+"="+p.endpoint)
	}
	if getenv(serviceNameEnv) == "" {
		env = append(env, serviceNameEnv+"="+service)
	}
	return env
}

// startJaeger starts bin/jaeger on the default addresses (in-memory
// storage, its configuration in data/jaeger/, its log in data/jaeger.log)
// and waits until its OTLP receiver and query API listen.
func startJaeger() (*exec.Cmd, error) {
	bin, err := jaeger.Binary()
	if err != nil {
		return nil, err
	}
	opts, config, err := jaeger.WriteConfig(jaeger.Options{
		OTLPHTTP: jaeger.DefaultOTLPHTTP, OTLPGRPC: jaeger.DefaultOTLPGRPC,
		QueryHTTP: jaeger.DefaultQueryHTTP, QueryGRPC: jaeger.DefaultQueryGRPC,
		Dir: filepath.Join(dataDir, "jaeger"),
	})
	if err != nil {
		return nil, err
	}
	cmd, err := startListening("jaeger", "the trace viewer", opts.OTLPHTTP, 30*time.Second, bin, jaeger.Args(config)...)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(30 * time.Second)
	for !listening(opts.QueryHTTP) {
		if time.Now().After(deadline) {
			stopAll([]*exec.Cmd{cmd})
			return nil, fmt.Errorf("the trace store's query API did not listen on %s within 30 s; see %s", opts.QueryHTTP, filepath.Join(dataDir, "jaeger.log"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	return cmd, nil
}
