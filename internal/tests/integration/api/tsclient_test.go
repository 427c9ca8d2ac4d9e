package api_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/entityflow/entityflow/internal/service/idempotency/memory"
	"github.com/entityflow/entityflow/internal/testkit/testenv"
	"github.com/entityflow/entityflow/tenant"
)

// clientDir is the TypeScript client's folder, from this package's.
var clientDir = filepath.Join("..", "..", "..", "..", "clients", "ts")

// The TypeScript client (clients/ts), generated from the OpenAPI document by
// openapi-typescript and wrapping openapi-fetch, against the real API in
// front of a dev server and both workers: its types check (tsc), its
// generated file is current, and its node:test tests pass: points with an
// Idempotency-Key and the replay, a 422 problem, a 401, an activity
// definition and an event. Every request it sends and every answer it gets
// is held to the document too (the stack's openapitest.Handler).
func TestTypeScriptClient(t *testing.T) {
	testenv.Short(t, "Node.js")
	node, err := exec.LookPath("node")
	testenv.Require(t, "Node.js", err)
	npm, err := exec.LookPath("npm")
	testenv.Require(t, "npm", err)
	installModules(t, npm)
	s := newStack(t, memory.NewStore(0))

	run(t, nil, node, filepath.Join("node_modules", "typescript", "bin", "tsc"), "--noEmit")
	tests, err := filepath.Glob(filepath.Join(clientDir, "test", "*.test.ts"))
	if err != nil || len(tests) == 0 {
		t.Fatalf("no tests in %s/test: %v", clientDir, err)
	}
	args := []string{"--import", "tsx", "--test"}
	for _, f := range tests {
		rel, err := filepath.Rel(clientDir, f)
		if err != nil {
			t.Fatal(err)
		}
		args = append(args, rel)
	}
	env := []string{"ENTITYFLOW_API_URL=" + s.url, "ENTITYFLOW_TOKEN=" + s.token(tenant.Default), "ENTITYFLOW_TENANT=" + tenant.Default}
	out := run(t, env, node, args...)
	t.Logf("node --test:\n%s", out)
}

// installModules runs `npm ci` in the client's folder when its node_modules
// is missing or older than its package-lock.json (make tools runs it too).
func installModules(t *testing.T, npm string) {
	t.Helper()
	lock, err := os.Stat(filepath.Join(clientDir, "package-lock.json"))
	if err != nil {
		t.Fatal(err)
	}
	installed, err := os.Stat(filepath.Join(clientDir, "node_modules", ".package-lock.json"))
	if err == nil && !installed.ModTime().Before(lock.ModTime()) {
		return
	}
	run(t, nil, npm, "ci", "--no-audit", "--no-fund")
}

// run runs name with args in the client's folder, with env added to the
// test's environment, and returns its output; a failure fails the test
// with the output.
func run(t *testing.T, env []string, name string, args ...string) []byte {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), name, args...)
	cmd.Dir = clientDir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %v in %s: %v\n%s", filepath.Base(name), args, clientDir, err, out)
	}
	return out
}
