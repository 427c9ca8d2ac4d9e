// Package rewardsworker builds the worker for the rewards task queue: the
// entity workflow and its activities, registered under their contract names.
// The worker program, the integration tests and the history recorder share it,
// so they run exactly what is deployed.
package rewardsworker

import (
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	rewardsact "github.com/entityflow/entityflow/activities/rewards"
	"github.com/entityflow/entityflow/internal/infra/pollers"
	"github.com/entityflow/entityflow/workflows/rewards"
)

// New returns a worker for the rewards task queue of c. Facts the entity
// reports go to recorder; search attribute support is read from namespace.
func New(c client.Client, namespace string, recorder rewardsact.RewardsRecorder, opts worker.Options) worker.Worker {
	return NewWithFeed(c, namespace, recorder, Feed{}, opts)
}

// Feed is the change feed of a worker: which changes the entities it starts
// publish (the zero value: none) and the publisher of the PublishChanges
// activity (nil: the activity fails and waits for a worker that has one).
type Feed struct {
	Mode      rewards.FeedMode
	Publisher rewardsact.ChangePublisher
	// OnPublish, when set, is told of every PublishChanges attempt (the
	// worker's change feed metrics).
	OnPublish func(rewardsact.PublishAttempt)
}

// NewWithFeed is New on a worker whose entities publish the change feed.
func NewWithFeed(c client.Client, namespace string, recorder rewardsact.RewardsRecorder, feed Feed, opts worker.Options) worker.Worker {
	w := worker.New(c, rewards.RewardsTaskQueue, options(opts))
	mode := feed.Mode
	if mode == "" {
		mode = rewards.FeedOff
	}
	rewards.RegisterWith(w, mode)
	acts := &rewardsact.Rewards{
		Recorder:         recorder,
		SearchAttributes: rewardsact.ClientSearchAttributes(c, namespace),
		Changes:          feed.Publisher,
		OnPublish:        feed.OnPublish,
	}
	acts.Register(w)
	return w
}

// options are opts with what the entity relies on: a workflow panic fails
// the workflow task, never the workflow, so an entity whose input this code
// cannot serve keeps its state and waits for a worker that can (the entity
// panics on purpose then, workflows/rewards/rewards_serve.go). Pollers opts leaves
// unset autoscale (pollers.Default), so that the first workflow task of a
// burst of new entities does not queue behind the SDK's two pollers.
func options(opts worker.Options) worker.Options {
	opts.WorkflowPanicPolicy = worker.BlockWorkflow
	return pollers.Default(opts)
}
